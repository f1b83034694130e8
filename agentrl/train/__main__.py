"""``python -m agentrl.train CONFIG.yaml [options]``: the same as ``agentrl train``, for ``torchrun``."""

import sys

from agentrl.cli import main

sys.exit(main(["train", *sys.argv[1:]]))
