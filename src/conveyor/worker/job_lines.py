"""One log line per job start, completion (with its duration) and failure
(with its traceback) on the `conveyor.jobs` logger: at INFO, but a final
failure at WARNING, so that the default level shows it. Every record carries
the job's id, task, queue and attempt (`extra`), and so does every record a
handler logs while its job runs (JobFields, for `--log-format json`).

The worker picks the hook by the level `conveyor.jobs` logs at when it
starts: JobLines at INFO; at WARNING JobFailureLines, which only hears of
written failures (a job that succeeds costs it nothing).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from conveyor.hooks import Hook, RunningJob
from conveyor.worker.context import current_job_or_none

log = logging.getLogger("conveyor.jobs")

JOB_FIELDS = ("job_id", "task", "queue", "attempt")


def fields_of(job: RunningJob) -> dict[str, Any]:
    return {"job_id": job.id, "task": job.task, "queue": job.queue, "attempt": job.attempt}


class JobFailureLines(Hook):
    """A line per failed run once its outcome is written: a final failure at
    WARNING (shown by default), one that will be retried at INFO, each with
    its traceback. A run that succeeds costs it nothing."""

    def on_retry(self, job: RunningJob, *, error: str) -> None:
        self._failed(job, error, logging.INFO, "failed{}, will retry")

    def on_final_failure(self, job: RunningJob, *, error: str) -> None:
        self._failed(job, error, logging.WARNING, "failed for good{}")

    def _took(self, job: RunningJob) -> str:
        return ""

    def _failed(self, job: RunningJob, error: str, level: int, what: str) -> None:
        # `error` is the stored text: `Type: message`, then the traceback
        log.log(
            level, "job %s (%s, attempt %d) %s: %s",
            job.id, job.task, job.attempt, what.format(self._took(job)), error,
            extra=fields_of(job),
        )  # fmt: skip


class JobLines(JobFailureLines):
    """JobFailureLines with the failed run's duration, and a line per start,
    completion and stopped run (INFO)."""

    def __init__(self) -> None:
        self._durations: dict[int, float] = {}  # id(job) -> seconds of its failed run

    def before_run(self, job: RunningJob) -> None:
        log.info(
            "job %s (%s, attempt %d) started", job.id, job.task, job.attempt, extra=fields_of(job)
        )

    def after_success(self, job: RunningJob, *, duration: float) -> None:
        log.info(
            "job %s (%s, attempt %d) completed in %.3f s",
            job.id, job.task, job.attempt, duration, extra=fields_of(job),
        )  # fmt: skip

    def after_failure(
        self, job: RunningJob, exc: BaseException | None, *, error: str, duration: float
    ) -> None:
        self._durations[id(job)] = duration  # told with the outcome, once it is written

    def after_stopped(self, job: RunningJob, *, duration: float) -> None:
        log.info(
            "job %s (%s, attempt %d) stopped after %.3f s: lease lost or given back",
            job.id, job.task, job.attempt, duration, extra=fields_of(job),
        )  # fmt: skip

    def on_lease_lost(self, job: RunningJob) -> None:
        self._durations.pop(id(job), None)

    def _took(self, job: RunningJob) -> str:
        duration = self._durations.pop(id(job), None)
        return "" if duration is None else f" after {duration:.3f} s"


def job_lines() -> Hook | None:
    """The job lines hook for the level `conveyor.jobs` logs at now."""
    if log.isEnabledFor(logging.INFO):
        return JobLines()
    if log.isEnabledFor(logging.WARNING):
        return JobFailureLines()
    return None


class JobFields(logging.Filter):
    """Adds the running job's id, task, queue and attempt to each record
    logged from its handler (those that do not carry them already)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "job_id"):
            job = current_job_or_none()
            if job is not None:
                for name, value in fields_of(job).items():
                    setattr(record, name, value)
        return True


class JobLogHandler(logging.Handler):
    """Sends each record logged while a job runs (by its handler, or code it
    calls) to that job's own log, as `current_job().log(...)` does:

        logging.getLogger("app").addHandler(JobLogHandler())

    Records logged outside a job are left to the other handlers. A record
    logged while writing one (a failed write's warning) is not sent again."""

    def __init__(self, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self._writing = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        job = current_job_or_none()
        if job is None or getattr(self._writing, "on", False):
            return
        self._writing.on = True
        try:
            job.log(self.format(record))
        except Exception:
            self.handleError(record)
        finally:
            self._writing.on = False
