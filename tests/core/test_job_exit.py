"""The job's exit as the box's files report it: the other side of a trust boundary."""

from __future__ import annotations

import math

import pytest

from gpuops.agent.jobio import EXIT_CODE_BYTES, JOB_DIR, JobExit, job_exit, job_seconds
from gpuops.errors import GpuopsError

pytestmark = pytest.mark.unit


class FilesBox:
    """A box that only has files: ``read_file(path)`` -> bytes or None."""

    def __init__(self, exit_code: bytes | None, marker: bool = True):
        self.files = {f"{JOB_DIR}/exit_code": exit_code}
        self.limits: list[int | None] = []
        if marker:
            self.files[f"{JOB_DIR}/exit_marker"] = b""

    def read_file(self, path: str, offset: int = 0, limit: int | None = None) -> bytes | None:
        self.limits.append(limit)
        data = self.files.get(path)
        return data if data is None or limit is None else data[offset : offset + limit]


def test_a_running_job_has_no_exit():
    assert job_exit(FilesBox(b"0\n1.0\n2.0\n", marker=False)) is None


def test_the_wrappers_file_is_read_whole():
    assert job_exit(FilesBox(b"137\n1700000000.250\n1700000060.500\n")) == JobExit(137, 1700000000.25, 1700000060.5)


def test_a_filled_exit_code_file_is_not_read_whole():
    # A job may fill the file after its marker (gigabytes): only its head is read, and the numbers
    # the wrapper wrote first still count.
    box = FilesBox(b"3\n100.0\n160.0\n" + b" " * (64 << 20) + b"999")
    assert job_exit(box) == JobExit(3, 100.0, 160.0)
    assert box.limits == [1, EXIT_CODE_BYTES]  # the marker only for whether it is there


def test_a_filled_marker_is_not_read_whole():
    box = FilesBox(b"0\n1.0\n2.0\n")
    box.files[f"{JOB_DIR}/exit_marker"] = b" " * (64 << 20)
    assert job_exit(box) == JobExit(0, 1.0, 2.0) and box.limits[0] == 1


@pytest.mark.parametrize("code", [b"abc", b"-1", b"256", b"1e3", b"\xff\xfe", "\u0663".encode(), b"1" * 5000])
def test_an_exit_code_that_is_not_0_to_255_names_the_file(code):
    with pytest.raises(GpuopsError) as e:
        job_exit(FilesBox(code + b"\n1.0\n2.0\n"))
    assert "the job's exit code on the box is not a number 0-255" in e.value.message
    assert e.value.fix == f"inspect {JOB_DIR}/exit_code on the box"


@pytest.mark.parametrize("times", [b"", b"\nnan\ninf", b"\nx\n-inf", b"\n1e400\n2"])
def test_times_that_are_not_finite_numbers_are_dropped(times):
    ended = job_exit(FilesBox(b"0" + times))
    assert ended is not None and ended.code == 0
    assert ended.started is None or ended.ended is None
    assert job_seconds(ended, 60.0) is None


@pytest.mark.parametrize(
    "started,ended,ran_here_s,seconds",
    [
        (100.0, 160.5, 61.0, 60.5),  # the box's clock, inside what this machine saw
        (100.0, 1e12, 61.0, 61.0),  # a forged end: no more than the job ran here
        (160.0, 100.0, 61.0, 0.0),  # an end before the start: never negative
        (100.0, 160.0, -1.0, 0.0),
    ],
)
def test_job_seconds_are_held_to_what_this_machine_saw(started, ended, ran_here_s, seconds):
    assert math.isclose(job_seconds(JobExit(0, started, ended), ran_here_s), seconds, abs_tol=1e-9)
