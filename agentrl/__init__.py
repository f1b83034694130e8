"""agentrl: train tool-using deep-research agents with reinforcement learning.

The top-level package stays light (no torch, no transformers) so that ``agentrl --help`` answers
at once; import the submodules you need: ``agentrl.trajectory``, ``agentrl.algos``, ...
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
