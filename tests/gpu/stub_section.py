"""A section for the kit's own tests: it records a figure, then does what ``KIT_STUB`` says —
``sleep`` past any budget, ``exit`` its process with code 3, or ``raise``."""

from __future__ import annotations

import os
import time

from tests.gpu.report import Recorder

TITLE = "the kit's test stub"
BUDGET_S = 60.0


def run(ctx, rec: Recorder) -> None:  # type: ignore[no-untyped-def]
    rec.figure("recorded_before", 1.0)
    what = os.environ.get("KIT_STUB", "sleep")
    if what == "sleep":
        time.sleep(600)
    elif what == "exit":
        os._exit(3)
    elif what == "raise":
        raise ValueError("the stub failed\nsecond line")
