"""Goal ids are single safe path segments, checked before any path is built."""

from __future__ import annotations

import pytest

from loopx.errors import InvalidGoalIdError
from loopx.ids import GOAL_ID_RULE, is_valid_goal_id, validate_goal_id
from loopx.root import Layout


@pytest.mark.parametrize(
    "bad",
    [
        "../x",
        "a/b",
        ".",
        "..",
        "",
        "a" * 65,
        "a\x00b",
        "a\nb",
        "-lead",
        ".hidden",
        "a b",
        "a\\b",
        "é",
    ],
)
def test_bad_ids_are_rejected_with_the_rule(bad: str) -> None:
    """Every unsafe id raises InvalidGoalIdError whose hint shows the rule."""
    with pytest.raises(InvalidGoalIdError) as info:
        validate_goal_id(bad)
    assert GOAL_ID_RULE in (info.value.hint or "")
    assert not is_valid_goal_id(bad)  # the scans' fast check agrees


@pytest.mark.parametrize("good", ["a", "A1", "goal-1", "x.y_z", "9" * 64])
def test_good_ids_pass(good: str) -> None:
    """Ids within the rule are returned unchanged."""
    assert validate_goal_id(good) == good
    assert is_valid_goal_id(good)


def test_paths_validate_before_building(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A layout never builds a path from an unsafe id."""
    layout = Layout.at(tmp_path)
    with pytest.raises(InvalidGoalIdError):
        layout.state_file("../../etc")
