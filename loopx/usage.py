"""What one turn's host consumed: measured by psutil, plus what the host CLI reported."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from loopx.model import Record

NonNegFloat = Annotated[float, Field(ge=0.0)]
NonNegInt = Annotated[int, Field(ge=0)]


class Usage(Record):
    """Resources of one turn's whole host process tree.

    ``cpu_s`` is user + system time of every process of the tree (sampled
    descendants plus the direct child's exit rusage), ``wall_s`` the host's
    run time and ``peak_rss_mb`` the largest summed RSS of the tree seen.
    Tokens and cost come from the host's own report (codex, claude, gemini); 0 when
    the host reports none.
    """

    cpu_s: NonNegFloat = 0.0
    wall_s: NonNegFloat = 0.0
    peak_rss_mb: NonNegFloat = 0.0
    input_tokens: NonNegInt = 0
    output_tokens: NonNegInt = 0
    cost_usd: NonNegFloat = 0.0

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens
