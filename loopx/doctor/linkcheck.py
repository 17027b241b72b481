"""The notifications' links: whether the dashboard address they point at answers."""

from __future__ import annotations

from loopx.doctor.findings import Checker, FindingCode, Severity
from loopx.notify.links import link_base, probe
from loopx.notify.targets import config_path, load_config


def check_links(doc: Checker) -> None:
    """With notification targets: a links' base that is missing or does not answer (a GET)."""
    path = config_path(doc.layout)
    try:
        config = load_config(doc.layout)
    except Exception:  # noqa: BLE001 - a damaged notify.json is the files check's to report
        return
    if not config.targets:
        return
    base = link_base(doc.layout, config)
    repair = "loopx notify set --link-base URL  (the address people open; or run `loopx serve`)"
    if base is None:
        doc.add(
            Severity.WARNING,
            FindingCode.LINK_BASE,
            path,
            "the notifications' links have no dashboard address (none set, and no "
            "`loopx serve` runs): a message's link opens nothing",
            repair,
        )
        return
    problem = probe(base)
    if problem is not None:
        doc.add(
            Severity.WARNING,
            FindingCode.LINK_BASE,
            path,
            f"the notifications' links point at {problem}",
            repair,
        )
