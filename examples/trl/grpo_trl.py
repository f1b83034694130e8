"""GRPO with TRL's GRPOTrainer on our deep-research env: our rollout function, our judge as reward.

    python examples/trl/grpo_trl.py --model Qwen/Qwen3-0.6B --use-vllm --steps 200
    python examples/trl/grpo_trl.py --model tiny:layers=1,hidden=32,heads=2,kv_heads=1 --steps 1   # CPU smoke run

``tiny:`` builds a random model and a tokenizer trained in-process (no download). Each prompt of the
dataset is one task of the suite; the rollout function runs a whole episode per prompt (all turns
in lock-step through the trainer's generation backend) and hands TRL our expander's ids, logprobs
and env_mask; the reward function is our rubric score / LLM judge.
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def _tokenizer_and_model(spec: str, env_config: dict[str, Any], limit: int | None) -> tuple[Any, Any]:
    if not spec.startswith("tiny:"):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return AutoTokenizer.from_pretrained(spec), AutoModelForCausalLM.from_pretrained(spec, dtype="auto")
    from agentrl.integrations.task_data import task_rows
    from agentrl.learn.models import build_tiny_model
    from agentrl.train.tokenizer import train_chat_tokenizer

    texts = [m["content"] for r in task_rows(env_config, engine="trl", limit=limit) for m in r["prompt"]]
    tok = train_chat_tokenizer(texts * 4, 1024)
    return tok, build_tiny_model(len(tok), spec)


def main(argv: list[str] | None = None) -> Any:
    """Train and return the ``GRPOTrainer`` (its ``state.log_history`` holds the metrics)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="Qwen/Qwen3-0.6B", help="HF model id or path, or tiny:<sizes>")
    ap.add_argument("--suite", default=None, help="env suite directory (default: the embedded sandbox)")
    ap.add_argument("--judge-model", default=None, help="litellm model for rubrics with LLM criteria")
    ap.add_argument("--judge-api-base", default=None)
    ap.add_argument("--limit", type=int, default=None, help="use only the first N tasks")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=8, help="episodes per device per step")
    ap.add_argument("--num-generations", type=int, default=8, help="GRPO group size")
    ap.add_argument("--max-new-tokens", type=int, default=1024, help="tokens per assistant turn")
    ap.add_argument(
        "--max-completion-tokens", type=int, default=8192, help="tokens per episode after the prompt"
    )
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--use-vllm", action="store_true", help="generate with vLLM (colocate mode)")
    ap.add_argument("--output-dir", default="runs/trl-grpo")
    args = ap.parse_args(argv)

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agentrl.integrations.task_data import task_rows
    from agentrl.integrations.trl import make_reward_func, make_rollout_func

    env = {"suite": args.suite} if args.suite else {}
    judge = {"model": args.judge_model, "api_base": args.judge_api_base} if args.judge_model else None
    settings = {"env": env, "judge": judge, "max_new_tokens": args.max_new_tokens}
    tokenizer, model = _tokenizer_and_model(args.model, env, args.limit)
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_new_tokens,
        learning_rate=args.lr,
        use_vllm=args.use_vllm,
        vllm_mode="colocate",
        logging_steps=1,
        report_to=[],
        bf16=not args.model.startswith("tiny:"),
        use_cpu=args.model.startswith("tiny:"),
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[make_reward_func(settings)],
        args=config,
        train_dataset=Dataset.from_list(task_rows(env, engine="trl", limit=args.limit)),
        rollout_func=make_rollout_func(settings, max_completion_tokens=args.max_completion_tokens),
    )
    trainer.train()
    return trainer


if __name__ == "__main__":
    main()
