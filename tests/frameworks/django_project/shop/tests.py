"""ConveyorBackend against PostgreSQL and a private Redis: settings name a development Redis
(DEVELOPMENT_REDIS, not there), and Conveyor's test runner (TEST_RUNNER) points every backend at
a redis-server of its own for the run, which setUp flushes.
TransactionTestCase: commits are real here."""

import io
import os
import tempfile
from datetime import timedelta
from unittest import mock

import redis
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.test import TransactionTestCase
from django.utils import timezone

from conveyor import JobState, Queue
from conveyor.integrations.django._compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from conveyor.integrations.django.backend import ConveyorBackend
from shop.models import Order
from shop.tasks import DeclinedError, add, explode, flaky, send_receipt, shout

SIGNALS = {"enqueued": task_enqueued, "started": task_started, "finished": task_finished}


class ConveyorBackendTests(TransactionTestCase):
    def setUp(self):
        url = task_backends["default"].url
        # the test runner's own server: never the development Redis of settings
        self.assertNotEqual(url, settings.DEVELOPMENT_REDIS)
        self.assertEqual(url, os.environ["CONVEYOR_REDIS_URL"])
        with redis.Redis.from_url(url) as client:
            client.flushall()
        self.queue = Queue("default")
        self.seen = []
        self.receivers = {}
        for name, signal in SIGNALS.items():
            def receiver(sender, task_result, name=name, **kwargs):
                self.seen.append((name, task_result.status, task_result.id))
            self.receivers[name] = receiver
            signal.connect(receiver)

    def tearDown(self):
        for name, signal in SIGNALS.items():
            signal.disconnect(self.receivers[name])
        self.queue.close()
        task_backends["default"].close()
        task_backends["retrying"].close()

    def waiting(self, queue=None):
        return (queue or self.queue).counts()[JobState.WAITING]

    def work(self, queue="default", *more):
        out = io.StringIO()
        call_command(
            "conveyor_worker", "--burst", "--concurrency", "1", "--queue", queue, *more,
            stdout=out,
        )
        return out.getvalue()

    def test_the_job_reaches_redis_when_the_transaction_commits(self):
        with transaction.atomic():
            order = Order.objects.create(total=10)
            result = send_receipt.enqueue(order.id)
            self.assertEqual(self.waiting(), 0)  # not before the commit
            self.assertIsNone(result.enqueued_at)
        self.assertEqual(self.waiting(), 1)
        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertIsNotNone(result.enqueued_at)
        self.assertEqual(self.queue.get(result.id).task, "shop.tasks.send_receipt")

        self.assertIn("1 completed, 0 failed", self.work())

        order.refresh_from_db()
        self.assertTrue(order.receipt_sent)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, f"receipt for order {order.id}")
        self.assertEqual(result.attempts, 1)
        self.assertEqual(result.args, [order.id])
        self.assertEqual(send_receipt.get_result(result.id).return_value, result.return_value)
        self.assertEqual(
            self.seen,
            [
                ("enqueued", TaskResultStatus.READY, result.id),
                ("started", TaskResultStatus.RUNNING, result.id),
                ("finished", TaskResultStatus.SUCCESSFUL, result.id),
            ],
        )

    def test_a_rolled_back_transaction_enqueues_nothing(self):
        with self.assertRaises(RuntimeError), transaction.atomic():
            order = Order.objects.create(total=10)
            send_receipt.enqueue(order.id)
            raise RuntimeError("rolled back")
        self.assertEqual(Order.objects.count(), 0)
        self.assertEqual(sum(self.queue.counts().values()), 0)
        self.assertEqual(self.seen, [])

        with transaction.atomic():  # a rolled-back savepoint drops its jobs only
            try:
                with transaction.atomic():
                    send_receipt.enqueue(1)
                    raise RuntimeError("savepoint rolled back")
            except RuntimeError:
                pass
            kept = send_receipt.enqueue(2)
        self.assertEqual(self.queue.job_ids(JobState.WAITING), [kept.id])

    def test_outside_a_transaction_the_job_is_enqueued_at_once(self):
        result = shout.enqueue("hi")
        mail = Queue("mail")
        self.assertEqual(self.waiting(mail), 1)
        self.work("mail")
        self.assertEqual(shout.get_result(result.id).return_value, "HI")
        mail.close()

    def test_one_worker_serves_several_queues_in_order(self):
        mail = shout.enqueue("hi")
        receipt = send_receipt.enqueue(1)
        out = self.work("mail,default")
        self.assertIn("2 completed, 0 failed", out)
        lines = [line for line in out.splitlines() if line.startswith("conveyor worker")]
        self.assertEqual(len(lines), 2, out)
        self.assertIn("queue 'mail', tasks ['shop.tasks.shout'] (and 3 of other queues", lines[0])
        self.assertIn("queue 'default', tasks ['shop.tasks.add', 'shop.tasks.explode', "
                      "'shop.tasks.send_receipt'] (and 1 of other queues", lines[1])
        self.assertEqual(shout.get_result(mail.id).status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(send_receipt.get_result(receipt.id).status, TaskResultStatus.SUCCESSFUL)
        weighted = self.work("mail:1,default:3")
        self.assertIn("queue 'default' (weight 3)", weighted)
        with self.assertRaisesMessage(CommandError, "['elsewhere'] not in the backend's QUEUES"):
            self.work("default,elsewhere")
        with self.assertRaisesMessage(CommandError, "named twice"):
            self.work("default,default")

    def test_every_failed_attempt_is_in_errors(self):
        result = flaky.enqueue(7)
        out = self.work("default", "--backend", "retrying")
        self.assertIn("0 completed, 1 failed", out)
        got = flaky.get_result(result.id)
        self.assertEqual(got.status, TaskResultStatus.FAILED)
        self.assertEqual(got.attempts, 3)
        self.assertEqual(len(got.errors), 3)
        for error in got.errors:
            self.assertEqual(error.exception_class_path, "shop.tasks.DeclinedError")
            self.assertIn("declined 7", error.traceback)

    def test_async_task_aenqueue_aget_result_and_context(self):
        result = async_to_sync(add.aenqueue)(2, b=3)
        self.work()
        got = async_to_sync(add.aget_result)(result.id)
        self.assertEqual(got.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(got.return_value, {"sum": 5, "attempt": 1, "id": result.id})
        self.assertEqual(got.kwargs, {"b": 3})
        self.assertEqual([name for name, *_ in self.seen], ["enqueued", "started", "finished"])

    def test_priorities_and_run_after(self):
        low = send_receipt.using(priority=-50).enqueue(1)
        high = send_receipt.using(priority=50).enqueue(2)
        normal = send_receipt.enqueue(3)
        later = send_receipt.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(4)
        self.assertEqual(self.queue.job_ids(JobState.WAITING), [high.id, normal.id, low.id])
        self.assertEqual(self.queue.job_ids(JobState.DELAYED), [later.id])
        got = send_receipt.get_result(high.id)
        self.assertEqual((got.status, got.task.priority), (TaskResultStatus.READY, 50))
        self.assertEqual(send_receipt.get_result(later.id).status, TaskResultStatus.READY)

    def test_a_failure_keeps_its_exception(self):
        result = explode.enqueue()
        self.assertIn("0 completed, 1 failed", self.work())
        got = explode.get_result(result.id)
        self.assertEqual(got.status, TaskResultStatus.FAILED)
        [error] = got.errors
        self.assertEqual(error.exception_class_path, "shop.tasks.DeclinedError")
        self.assertIs(error.exception_class, DeclinedError)
        self.assertIn("card declined", error.traceback)
        with self.assertRaises(ValueError):
            got.return_value  # noqa: B018
        self.assertEqual(self.seen[-1], ("finished", TaskResultStatus.FAILED, result.id))

    def test_validation_and_unknown_results(self):
        with self.assertRaises(InvalidTask):
            send_receipt.using(queue_name="elsewhere")
        with self.assertRaises(TaskResultDoesNotExist):
            send_receipt.get_result("no-such-job")
        with self.assertRaises(TaskResultDoesNotExist):
            send_receipt.get_result("not a valid id")
        with self.assertRaises(CommandError):
            call_command("conveyor_worker", "--burst", "--queue", "elsewhere")

    def test_checks(self):
        call_command("check", stdout=io.StringIO())  # the configured backend passes
        backend = ConveyorBackend(
            "broken",
            {
                "QUEUES": [],
                "OPTIONS": {"BOGUS": 1, "JOB_OPTIONS": {"retries": 3}, "DATABASE": "other"},
            },
        )
        ids = sorted(message.id for message in backend.check())
        self.assertEqual(ids, ["conveyor.E001", "conveyor.E002", "conveyor.E003", "conveyor.E005"])
        bad_url = ConveyorBackend("bad", {"OPTIONS": {"URL": "http://example.com/"}})
        self.assertEqual([m.id for m in bad_url.check()], ["conveyor.E006"])
        empty = tempfile.mkdtemp()  # no URL anywhere and no embedded Redis: only a warning
        with mock.patch.dict(os.environ, {"CONVEYOR_DATA_DIR": empty}):
            os.environ.pop("CONVEYOR_REDIS_URL")
            os.environ.pop("REDIS_URL", None)
            [warning] = ConveyorBackend("none", {}).check()
        self.assertEqual(warning.id, "conveyor.W001")
        self.assertIn("conveyor redis", warning.msg)
        self.assertTrue(
            backend.supports_defer
            and backend.supports_async_task
            and backend.supports_get_result
            and backend.supports_priority
        )
