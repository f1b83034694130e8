"""verl: our agent loop, subclassing verl's real AgentLoopBase, run on CPU with a fake server manager
(scripted oracle ids), built from examples/verl/agent_loop.yaml exactly as verl's worker builds it,
and checked against our expander; examples/verl/grpo.yaml checked against verl's own config tree.

Skipped where verl (>= 0.6, with its agent loop) is not installed; under this repo's pins (numpy 2,
transformers 5.23) pip finds no such verl, so CI skips it. See docs/integrations.md.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

agent_loop = pytest.importorskip(
    "verl.experimental.agent_loop.agent_loop", reason="verl>=0.6 with its agent loop is not installed"
)
hydra_utils = pytest.importorskip("hydra.utils")
from omegaconf import OmegaConf  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from agentrl.integrations.verl import AGENT_NAME, ResearchAgentLoop  # noqa: E402
from tests.integrations.helpers import OracleEngine, expected, tasks, tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "verl"


class FakeServerManager:
    """verl's server-manager contract (``generate(request_id, *, prompt_ids, sampling_params)`` →
    ``TokenOutput``) answered by the scripted oracle engine; records every call."""

    def __init__(self, engine: OracleEngine) -> None:
        self.engine = engine
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append({"request_id": request_id, "sampling_params": dict(sampling_params)})
        gen = await self.engine.generate(list(prompt_ids), sampling_params["max_tokens"])
        return TokenOutput(token_ids=gen.token_ids, log_probs=gen.logprobs, stop_reason="completed")


def _loop(server, response_length=4096):
    registry = OmegaConf.load(EXAMPLES / "agent_loop.yaml")
    entry = next(e for e in registry if e.name == AGENT_NAME)
    trainer = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 2048, "response_length": response_length}}}
    )
    # As verl's AgentLoopWorker does: instantiate the registry entry with the loop's arguments.
    return hydra_utils.instantiate(
        config=entry,
        trainer_config=agent_loop.DictConfigWrap(trainer),
        server_manager=server,
        tokenizer=tokenizer(),
        processor=None,
        dataset_cls=None,
        data_config=agent_loop.DictConfigWrap(OmegaConf.create({})),
    )


def test_agent_loop_output_is_our_expander_output():
    task = tasks()[0]
    server = FakeServerManager(OracleEngine(tasks()))
    loop = _loop(server)
    assert isinstance(loop, agent_loop.AgentLoopBase) and isinstance(loop, ResearchAgentLoop)
    assert agent_loop._agent_loop_registry[AGENT_NAME]["_target_"].endswith("ResearchAgentLoop")
    row = {"extra_info": {"task_id": task.id, "index": 3}, "raw_prompt": [], "index": 3}
    out = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0}, **row))
    assert isinstance(out, agent_loop.AgentLoopOutput)
    assert len({c["request_id"] for c in server.calls}) == 1  # one sticky session per episode
    assert all(c["sampling_params"]["temperature"] == 1.0 for c in server.calls)

    # The same trajectory, expanded by a fresh expander: the fields verl got must equal it.
    traj = loop.episode.trajectory
    assert traj.task_id == task.id and traj.info["seed"] == 3
    _, rec, last = expected(traj)
    assert out.prompt_ids == rec.prompt_ids
    assert out.response_ids == rec.completion_ids[:last]
    assert out.response_mask == rec.loss_mask[:last]
    assert out.response_logprobs == rec.rollout_logprobs[:last]
    assert out.reward_score == traj.reward.total > 0
    assert out.num_turns == len(traj.messages) == 7
    # verl's own conversion puts the scalar on the last response token: our last policy token.
    d = out.as_dict() if hasattr(out, "as_dict") else None
    if d is not None:
        np.testing.assert_array_equal(
            d["rm_scores"].numpy(), np.asarray(rec.token_level_scores[:last], np.float32)
        )
        assert d["response_mask"].tolist() == rec.loss_mask[:last]
    assert out.extra_fields["agentrl_token_level_scores"] == rec.token_level_scores[:last]
    assert out.metrics.generate_sequences >= 0 and out.metrics.tool_calls > 0


def test_response_length_caps_the_episode():
    server = FakeServerManager(OracleEngine(tasks()))
    out = asyncio.run(_loop(server, response_length=48).run({}, extra_info={"task_id": tasks()[1].id}))
    assert len(out.response_ids) <= 48 and out.reward_score == 0.0
    assert len(out.response_mask) == len(out.response_ids) == len(out.response_logprobs)


def test_grpo_example_keys_exist_in_verls_config():
    import verl.trainer.config as cfg_pkg
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(cfg_pkg.__file__).parent), version_base=None):
        base = OmegaConf.to_container(compose(config_name="ppo_trainer"), resolve=False)
    ours = OmegaConf.to_container(OmegaConf.load(EXAMPLES / "grpo.yaml"), resolve=False)
    ours.pop("hydra"), ours.pop("defaults")

    def leaves(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict) and v:
                yield from leaves(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}"

    def has(d, dotted):
        for part in dotted.split("."):
            if not isinstance(d, dict) or part not in d:
                return False
            d = d[part]
        return True

    missing = [k for k in leaves(ours) if not has(base, k)]
    assert not missing, f"examples/verl/grpo.yaml sets keys verl's ppo_trainer does not have: {missing}"
