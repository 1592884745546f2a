"""The one exception tree. Every error Conveyor raises derives from ConveyorError.

ConveyorError
├── ValidationError (also ValueError)       bad input; nothing was written
│   ├── InvalidNameError                    queue name, prefix, task name
│   ├── InvalidJobIdError
│   ├── PayloadTooLargeError
│   ├── NotSerializableError                data or result is not JSON
│   └── UnknownOptionError (also TypeError)
├── ConfigurationError                      bad settings (URL, missing Redis binary ...)
├── ServerError                             the Redis server cannot be used
│   ├── UnsupportedServerError              older than Redis 6.2
│   ├── EvictionPolicyError                 maxmemory-policy is not noeviction
│   ├── ProtocolVersionError                the queue was written by another protocol version
│   └── OutOfMemoryError                    maxmemory reached: the write was refused
├── ConnectionLostError                     Redis unreachable
│   └── UncertainWriteError                 sent, no reply: the write may have been applied
├── JobNotFoundError (also KeyError)
├── JobFailedError                          wait_result(): the job failed for good
├── WaitTimeoutError (also TimeoutError)    wait_result(): no outcome within the timeout
├── LeaseLostError                          a worker's write was refused (fencing)
├── JobTimeoutError (also TimeoutError)     a handler ran past its timeout
├── ProcessDiedError                        the child process running a job died
├── AbortedError                            a running job was aborted (Queue.abort)
└── PermanentError                          raised by a handler: fail now, never retry
"""

from __future__ import annotations

from datetime import datetime


class ConveyorError(Exception):
    """Root of every error Conveyor raises."""


class ValidationError(ConveyorError, ValueError):
    """Bad input, detected before anything was written to Redis."""


class InvalidNameError(ValidationError):
    pass


class InvalidJobIdError(ValidationError):
    pass


class PayloadTooLargeError(ValidationError):
    pass


class NotSerializableError(ValidationError):
    pass


class UnknownOptionError(ValidationError, TypeError):
    pass


class ConfigurationError(ConveyorError):
    pass


class ServerError(ConveyorError):
    pass


class UnsupportedServerError(ServerError):
    pass


class EvictionPolicyError(ServerError):
    pass


class ProtocolVersionError(ServerError):
    pass


class OutOfMemoryError(ServerError):
    pass


class ConnectionLostError(ConveyorError):
    """Redis could not be reached; the operation was not applied."""


class UncertainWriteError(ConnectionLostError):
    """The command was sent but no reply came: it may or may not have been
    applied. An enqueue has already been re-sent by the client with the same
    request id (a re-send of an applied call changes nothing) before this is
    raised. Enqueueing again yourself is a new call: safe for a job that has
    not started; for a job already running it waits as its blocked twin and
    runs again after (the singleton rule)."""


class JobNotFoundError(ConveyorError, KeyError):
    pass


class JobFailedError(ConveyorError):
    """The awaited job failed for good; `error` is its last error text."""

    def __init__(self, job_id: str, error: str) -> None:
        super().__init__(f"job {job_id!r} failed: {error}")
        self.job_id = job_id
        self.error = error


class WaitTimeoutError(ConveyorError, TimeoutError):
    pass


class JobTimeoutError(ConveyorError, TimeoutError):
    pass


class ProcessDiedError(ConveyorError):
    """The child process that ran a job (process execution) died while it
    ran: killed, crashed, `os._exit`, out of memory. The job is retried by
    its policy; the worker replaced the child."""


class AbortedError(ConveyorError):
    """A client aborted the job while it ran (`Queue.abort`): its worker
    stopped the handler and failed the run for good, without retries."""


class PermanentError(ConveyorError):
    """Raise from a handler to fail the job at once, without retries.

    Any exception may also carry `retry_at` (a datetime, or seconds since the
    epoch) to choose when the retry runs instead of the exponential backoff.
    """

    retry_at: datetime | float | None = None
