"""Counts in messages agree with their noun: one helper, used by the CLI, logs and errors."""

from __future__ import annotations

from rota.domain.errors import ResultTimeout, StepFailed
from rota.domain.wording import counted, plural


def test_a_count_of_one_takes_the_singular_and_any_other_the_plural() -> None:
    assert counted(1, "held job") == "1 held job"
    assert counted(3, "held job") == "3 held jobs"
    assert counted(0, "job") == "0 jobs"
    assert plural("job") == "jobs"
    assert plural("job", 1) == "job"


def test_errors_count_their_jobs_and_attempts_in_agreement() -> None:
    assert str(ResultTimeout([7], 2.0)) == "job 7 not finished after 2s"
    assert str(ResultTimeout([7, 8], 2.0)) == "jobs 7, 8 not finished after 2s"
    assert str(StepFailed("call", 1, "boom")) == "step 'call' failed 1 time; last error: boom"
    assert str(StepFailed("call", 3, "boom")) == "step 'call' failed 3 times; last error: boom"
