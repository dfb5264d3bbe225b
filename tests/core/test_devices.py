"""The device-spec table (contract section 5): one case per row, every bad form, each parser."""

from __future__ import annotations

import pytest

from accelctl import (
    DeviceSpecError,
    parse_indexed_devices,
    parse_process_count,
    parse_single_device,
)


def indexed(spec: object, visible: int = 4) -> list[int]:
    return parse_indexed_devices(spec, visible=visible, accelerator="fake")


# -- indexed accelerators --------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["auto", "AUTO", " auto ", -1, "-1", " -1 "])
def test_all_visible(spec: object) -> None:
    assert indexed(spec) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("spec", "expected"), [(1, [0]), (3, [0, 1, 2]), ("2", [0, 1]), (" 4 ", [0, 1, 2, 3])]
)
def test_first_k(spec: object, expected: list[int]) -> None:
    assert indexed(spec) == expected


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("1,3", [1, 3]),
        ("2,", [2]),
        (" 3, 0 ", [3, 0]),
        ("0,", [0]),
        ([2, 1], [2, 1]),
        ((0, 3), [0, 3]),
        ([0], [0]),
    ],
)
def test_exact_indices_in_rank_order(spec: object, expected: list[int]) -> None:
    assert indexed(spec) == expected


def test_numpy_style_integers_are_ints() -> None:
    class IntLike:
        def __index__(self) -> int:
            return 2

    assert indexed(IntLike()) == [0, 1]
    assert indexed([IntLike()]) == [2]


BAD_INDEXED = [
    (0, "asks for no device"),
    ("0", "asks for no device"),
    ([], "empty list"),
    ((), "empty list"),
    ("", "is empty"),
    ("   ", "is empty"),
    (None, "is not a device spec"),
    (True, "is a bool"),
    (False, "is a bool"),
    (1.5, "is a float"),
    (2.0, "is a float"),
    ("abc", 'is not "auto", a number'),
    ("[0]", 'is a list written as a string; write the indices without brackets: "0,"'),
    ("0-1", 'is a range, which accelctl does not read; list the indices instead: "0,1"'),
    ("1.5", 'is not "auto", a number'),
    (-2, "is negative"),
    ("-2", "is negative"),
    ("1,1", "repeats index 1"),
    ([2, 2], "repeats index 2"),
    ("4,", "holds index 4, which is out of range"),
    ([0, 7], "holds index 7"),
    (5, "asks for 5 devices, more than are visible"),
    ("5", "asks for 5 devices"),
    (",1", "empty item"),
    ("1,,2", "empty item"),
    ("a,b", "has 'a' in its list"),
    ("-1,0", "negative index -1"),
    ([-1], "negative index -1"),
    ([True], "which is not a device index"),
    (["0"], "which is not a device index"),
    ({0: 1}, "has type dict"),
    ({0}, "has type set"),
]


@pytest.mark.parametrize(("spec", "problem"), BAD_INDEXED)
def test_bad_indexed_specs_teach(spec: object, problem: str) -> None:
    with pytest.raises(DeviceSpecError) as info:
        indexed(spec)
    message = str(info.value)
    assert message.startswith(f"fake: devices={spec!r} "), (
        message
    )  # the accelerator, the spec as given
    assert problem in message
    assert "4 fake devices are visible (indices 0 to 3)" in message  # what is visible
    if isinstance(spec, str):  # the forms a string can take: a command line has no list
        assert 'Accepted: "auto" or "-1"' in message and "[i, j]" not in message
    else:  # the accepted forms of a Python value
        assert 'Accepted: "auto" or -1' in message and "[i, j]" in message
    assert isinstance(info.value, ValueError)
    assert info.value.accelerator == "fake" and info.value.spec == spec and info.value.visible == 4


@pytest.mark.parametrize("spec", ["auto", -1, 1])
def test_nothing_visible(spec: object) -> None:
    with pytest.raises(DeviceSpecError, match="no fake device is visible"):
        indexed(spec, visible=0)


def test_one_visible_phrase() -> None:
    with pytest.raises(DeviceSpecError, match=r"1 fake device is visible \(index 0\)"):
        indexed(2, visible=1)


# -- CPU: a process count ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"), [("auto", 1), (" Auto", 1), (1, 1), (4, 4), ("3", 3), (" 2 ", 2)]
)
def test_process_count(spec: object, expected: int) -> None:
    assert parse_process_count(spec) == expected


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        (-1, "means all devices of an indexed accelerator"),
        ("-1", "means all devices"),
        ("0,1", "lists device indices"),
        ([0], "lists device indices"),
        ((0, 1), "lists device indices"),
        ("0,", "lists device indices"),
        (0, "asks for no device"),
        ("", "is empty"),
        (None, "is not a device spec"),
        (True, "is a bool"),
        (1.5, "is a float"),
        ("abc", "is not"),
        (-2, "is negative"),
        ([], "empty list"),
    ],
)
def test_cpu_refusals_say_process_count(spec: object, problem: str) -> None:
    with pytest.raises(DeviceSpecError) as info:
        parse_process_count(spec)
    message = str(info.value)
    assert message.startswith(f"cpu: devices={spec!r}")
    assert problem in message
    assert "cpu takes a process count" in message
    assert 'use accelerator="cpu"' not in message  # no advice to do what is being done
    if isinstance(spec, str):
        assert 'Accepted: "auto" (1 process), "k" such as "2" (k processes)' in message
    else:
        assert 'Accepted: "auto" (1 process), k >= 1 or "k" (k processes)' in message


# -- single-device accelerators (MPS) ------------------------------------------------------------


@pytest.mark.parametrize("spec", ["auto", -1, "-1", 1, "1", [0], (0,), "0,", " 0, "])
def test_single_device(spec: object) -> None:
    assert parse_single_device(spec, accelerator="mps") == [0]


@pytest.mark.parametrize("spec", [2, "2", [0, 1], [1], "1,", 0, "abc", None, True, 1.5])
def test_single_device_refusals(spec: object) -> None:
    with pytest.raises(DeviceSpecError, match="mps exposes a single device") as info:
        parse_single_device(spec, accelerator="mps")
    assert "Accepted: " in str(info.value)


def test_single_device_absent() -> None:
    with pytest.raises(DeviceSpecError, match="not available here"):
        parse_single_device("auto", accelerator="mps", visible=0)
