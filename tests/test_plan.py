"""Batch plans are read whole and rejected with the field at fault before anything is registered."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopx.registry.goalrecords import HostKind
from loopx.registry.plan import PlanError, load_plan

TOML_PLAN = """
schema_version = 1

[[goals]]
id = "build"
objective = "build it"
host = "make -j2"
priority = 2
quota = { compute = 0.5, turn_timeout_s = 60 }

[[goals]]
id = "demo"
objective = "count to three"
workdir = "w/demo"
host_kind = "demo"
"""


def test_toml_plan_is_read(tmp_path: Path) -> None:
    """A TOML plan gives goals with hosts, quotas and workdirs relative to the plan."""
    path = tmp_path / "plan.toml"
    path.write_text(TOML_PLAN)
    plan = load_plan(path)
    build, demo = plan.goals
    assert build.host_spec().argv == ["make", "-j2"]
    assert build.host_spec().kind == HostKind.COMMAND
    assert build.quota.compute == 0.5
    assert demo.host_spec().kind == HostKind.DEMO
    assert demo.changes(tmp_path).workdir == str((tmp_path / "w" / "demo").resolve())


@pytest.mark.parametrize(
    ("text", "suffix", "expected"),
    [
        ('{"goals": [}', ".json", "line 1 column 12"),
        ("goals = [", ".toml", "TOML syntax"),
        ('{"goals": []}', ".json", "goals"),
        (
            (
                '{"goals": [{"id": "a", "objective": "x", "host": "make"}, '
                '{"id": "b", "objective": "y", "host": "make", "quota": {"compute": 3}}]}'
            ),
            ".json",
            "goals[1] (id 'b').quota.compute",
        ),
        ('{"goals": [{"id": "../x", "objective": "x"}]}', ".json", "goals[0] (id '../x').id"),
        (
            (
                '{"goals": [{"id": "a", "objective": "x", "host": "make"}, '
                '{"id": "a", "objective": "y", "host": "make"}]}'
            ),
            ".json",
            "appears twice",
        ),
        ('{"goals": [{"id": "a", "objective": "x", "colour": "red"}]}', ".json", "colour"),
        (
            '{"goals": [{"id": "a", "objective": "x"}]}',
            ".json",
            "goals[0] (id 'a'): Value error, no host",
        ),
        ("goals: []", ".yaml", "write it as .json or .toml"),
    ],
)
def test_malformed_plans_name_the_fault(
    tmp_path: Path, text: str, suffix: str, expected: str
) -> None:
    """Each malformed plan raises PlanError whose message names the line or field."""
    path = tmp_path / f"plan{suffix}"
    path.write_text(text)
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert expected in info.value.message
    assert str(path) in info.value.message


def test_missing_plan_is_a_clear_error(tmp_path: Path) -> None:
    """A plan path that does not exist says so."""
    with pytest.raises(PlanError, match="does not exist"):
        load_plan(tmp_path / "nope.json")


def test_a_directory_as_plan_is_a_clear_error(tmp_path: Path) -> None:
    """A directory given as the plan is named as such, not an IsADirectoryError."""
    plan = tmp_path / "plan.json"
    plan.mkdir()
    with pytest.raises(PlanError, match="is a directory"):
        load_plan(plan)
