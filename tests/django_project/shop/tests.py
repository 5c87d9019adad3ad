"""The Django integration under Django's own test runner (``manage.py test shop``, which
tests/test_contrib_django.py runs): SQLite files, the real Redis of ``$REDIS_URL``."""

import json
import os
from typing import ClassVar
from urllib.parse import unquote

import redis as redis_py
from cw_site.urls import OPS_ASKED
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import SimpleTestCase, TestCase, TransactionTestCase

import cogworker
from cogworker import keys, locks, testing
from cogworker.config import ConfigError
from cogworker.contrib.django import config
from cogworker.contrib.django.conf import read_settings
from cogworker.contrib.django.connections import CloseDatabaseConnections
from cogworker.contrib.django.discovery import autodiscover, load_jobs
from cogworker.contrib.django.transaction import AfterCommit, PushAtOnce
from cogworker.local.server import free_port
from shop.jobs import AuditJob, OneReceipt, ShipOrder
from shop.models import Order

SHOP = keys.queue("shop")


class Rollback(Exception):
    pass


def redis():
    return config().redis()


def queued(queue=SHOP):
    """The payloads on a queue, oldest first."""
    return [json.loads(raw) for raw in reversed(redis().lrange(queue, 0, -1))]


def queued_jids(queue=SHOP):
    return [job["jid"] for job in queued(queue)]


class FlushedRedis:
    def setUp(self):
        super().setUp()
        redis().flushdb()


class AfterCommitTests(FlushedRedis, TransactionTestCase):
    """Real transactions (TransactionTestCase commits): what reaches Redis, and when."""

    databases: ClassVar[set[str]] = {"default", "other"}

    def test_a_push_inside_a_transaction_reaches_redis_when_it_commits(self):
        with transaction.atomic():
            order = Order.objects.create(name="a")
            jid = ShipOrder.perform_async(order.pk, "m")
            self.assertIsNotNone(jid)  # the jid is returned at once
            self.assertEqual(queued_jids(), [])
        (job,) = queued()
        self.assertEqual((job["jid"], job["args"]), (jid, [order.pk, "m"]))
        self.assertNotIn("after_commit", job)

    def test_a_rolled_back_push_never_reaches_redis(self):
        with self.assertRaises(Rollback), transaction.atomic():
            ShipOrder.perform_async(1, "doomed")
            raise Rollback
        with transaction.atomic():
            kept = ShipOrder.perform_async(2, "kept")
        self.assertEqual(queued_jids(), [kept])

    def test_a_rolled_back_savepoint_drops_only_the_pushes_made_inside_it(self):
        with transaction.atomic():
            before = ShipOrder.perform_async(1, "outer")
            with self.assertRaises(Rollback), transaction.atomic():
                ShipOrder.perform_async(2, "inner")
                raise Rollback
            with transaction.atomic():  # a savepoint that is released: its push stays
                inner_kept = ShipOrder.perform_async(3, "inner-kept")
            after = ShipOrder.perform_async(4, "outer")
            self.assertEqual(queued_jids(), [])
        self.assertEqual(queued_jids(), [before, inner_kept, after])

    def test_outside_a_transaction_a_push_is_sent_at_once(self):
        jid = ShipOrder.perform_async(1, "now")
        self.assertEqual(queued_jids(), [jid])

    def test_after_commit_false_pushes_at_once_and_never_reaches_the_payload(self):
        with transaction.atomic():
            per_call = ShipOrder.set(after_commit=False).perform_async(1, "now")
            by_class = AuditJob.perform_async("now")
            self.assertEqual(queued_jids(), [per_call, by_class])
            held = AuditJob.set(after_commit=True).perform_async("later")
            self.assertEqual(len(queued()), 2)
        self.assertEqual(queued_jids(), [per_call, by_class, held])
        raw = redis().lrange(SHOP, 0, -1)
        self.assertTrue(all("after_commit" not in payload for payload in raw), raw)

    def test_scheduled_and_bulk_pushes_wait_for_the_commit_too(self):
        with transaction.atomic():
            scheduled = ShipOrder.perform_in(3600, 1, "later")
            bulk = ShipOrder.perform_bulk([[2, "bulk"], [3, "bulk"]])
            self.assertEqual(redis().zcard(keys.SCHEDULE), 0)
            self.assertEqual(queued_jids(), [])
        self.assertEqual(queued_jids(), bulk)
        (member,) = redis().zrange(keys.SCHEDULE, 0, -1)
        self.assertEqual(json.loads(member)["jid"], scheduled)

    def test_a_bulk_push_mixing_both_choices_is_refused(self):
        items = [
            {"class": "Shop::Audit", "queue": "shop", "args": [1]},
            {"class": "Shop::Audit", "queue": "shop", "args": [2], "after_commit": False},
        ]
        with self.assertRaisesMessage(ValueError, "mixes after_commit=True and after_commit=False"):
            cogworker.default_client().push_bulk(items)
        self.assertEqual(queued(), [])

    def test_a_bad_after_commit_value_is_refused_naming_it(self):
        with self.assertRaisesMessage(
            ValueError, "Shop::ShipOrder: after_commit must be True or False, got 'yes'"
        ):
            ShipOrder.set(after_commit="yes").perform_async(1, "x")
        self.assertEqual(queued(), [])

    def test_a_transaction_on_another_database_does_not_hold_a_push(self):
        # the followed alias is settings.COGWORKER["database"] (here "default")
        with transaction.atomic(using="other"):
            jid = ShipOrder.perform_async(1, "other")
            self.assertEqual(queued_jids(), [jid])

    def test_the_followed_alias_is_the_one_configured(self):
        other_config = cogworker.Config()
        other_config.defer_push = AfterCommit(other_config, "other")
        other = cogworker.Client(other_config)
        try:
            with transaction.atomic(using="other"):
                jid = ShipOrder.set(client=other).perform_async(1, "other")
                self.assertEqual(queued_jids(), [])
            self.assertEqual(queued_jids(), [jid])
        finally:
            other.close()

    def test_manual_transactions_are_refused(self):
        connection.ensure_connection()
        transaction.set_autocommit(False)
        try:
            with self.assertRaisesMessage(transaction.TransactionManagementError, "autocommit off"):
                ShipOrder.perform_async(1, "manual")
        finally:
            transaction.rollback()
            transaction.set_autocommit(True)
        self.assertEqual(queued(), [])

    def test_a_push_failing_at_commit_logs_its_jid_and_the_next_still_lands(self):
        unreachable = cogworker.Config(redis_url=f"redis://127.0.0.1:{free_port()}/0")
        unreachable.defer_push = AfterCommit(unreachable, "default")
        lost_client = cogworker.Client(unreachable)
        try:
            with (
                self.assertLogs("cogworker.contrib.django", "ERROR") as logged,
                transaction.atomic(),
            ):
                lost = ShipOrder.set(client=lost_client).perform_async(1, "lost")
                kept = ShipOrder.perform_async(2, "kept")
        finally:
            lost_client.close()
        self.assertEqual(queued_jids(), [kept])
        (line,) = logged.output
        self.assertIn(
            f"push after commit failed: Shop::ShipOrder jid={lost}: ConnectionError", line
        )

    def test_a_push_dropped_on_a_rollback_logs_one_line_with_its_jid(self):
        with (
            self.assertLogs("cogworker.contrib.django", "INFO") as logged,
            self.assertRaises(Rollback),
            transaction.atomic(),
        ):
            doomed = ShipOrder.perform_async(1, "doomed")
            raise Rollback
        self.assertEqual(
            logged.output,
            [
                f"INFO:cogworker.contrib.django:not pushed: Shop::ShipOrder jid={doomed}: its "
                "transaction rolled back, or an earlier on_commit callback failed"
            ],
        )

    def test_a_push_dropped_after_a_failing_on_commit_callback_is_logged_not_silent(self):
        def broken():
            raise RuntimeError("an earlier callback failed")

        with (
            self.assertLogs("cogworker.contrib.django", "INFO") as logged,
            self.assertRaisesMessage(RuntimeError, "an earlier callback failed"),
            transaction.atomic(),
        ):
            transaction.on_commit(broken)  # not robust: Django drops the callbacks after it
            first, second = ShipOrder.perform_bulk([[1, "lost"], [2, "lost"]])
        self.assertEqual(queued(), [])
        self.assertEqual(len(logged.output), 2, logged.output)  # one line per job
        for jid, line in zip((first, second), logged.output, strict=True):
            self.assertIn(f"not pushed: Shop::ShipOrder jid={jid}: ", line)

    def test_a_sent_push_logs_nothing_at_info(self):
        with self.assertNoLogs("cogworker.contrib.django", "INFO"), transaction.atomic():
            ShipOrder.perform_async(1, "sent")
        self.assertEqual(len(queued()), 1)


class AfterCommitOffTests(FlushedRedis, TransactionTestCase):
    """``COGWORKER = {"after_commit": False}``: no push waits, and the per-job key still never
    reaches Redis (checked on the raw bytes there)."""

    def setUp(self):
        super().setUp()
        self.off, _ = read_settings({"after_commit": False}, settings.DATABASES)
        self.client_off = cogworker.Client(self.off)
        self.raw = redis_py.Redis.from_url(os.environ["REDIS_URL"])

    def tearDown(self):
        self.raw.close()
        self.client_off.close()
        super().tearDown()

    def test_the_key_is_taken_out_before_the_push(self):
        with transaction.atomic():
            per_call = ShipOrder.set(client=self.client_off, after_commit=False).perform_async(
                1, "now"
            )
            by_class = AuditJob.set(client=self.client_off).perform_async("now")
            held_anyway = ShipOrder.set(client=self.client_off, after_commit=True).perform_async(
                2, "now"
            )
            self.assertEqual(queued_jids(), [per_call, by_class, held_anyway])  # none waits
        raw = self.raw.lrange(SHOP, 0, -1)
        self.assertEqual(len(raw), 3)
        self.assertTrue(all(b"after_commit" not in payload for payload in raw), raw)

    def test_a_bad_value_is_still_refused_naming_it(self):
        with self.assertRaisesMessage(
            ValueError, "Shop::ShipOrder: after_commit must be True or False, got 'yes'"
        ):
            ShipOrder.set(client=self.client_off, after_commit="yes").perform_async(1, "x")
        self.assertEqual(queued(), [])

    def test_your_own_defer_push_sees_the_payloads_without_the_key(self):
        held = []

        def mine(jobs, send):
            held.append((jobs, send))
            return True

        own, _ = read_settings({"after_commit": False, "defer_push": mine}, settings.DATABASES)
        with cogworker.Client(own) as client:
            jid = AuditJob.set(client=client).perform_async("mine")
            self.assertEqual(queued(), [])  # mine took it
            ((jobs, send),) = held
            self.assertEqual([job["jid"] for job in jobs], [jid])
            self.assertNotIn("after_commit", jobs[0])
            send()
        self.assertEqual(queued_jids(), [jid])
        self.assertNotIn(b"after_commit", self.raw.lindex(SHOP, 0))


class UniqueJobTests(FlushedRedis, TransactionTestCase):
    """A unique job's lock is taken at the push; a push dropped by a rollback frees it."""

    def lock_owner(self, *args):
        job = {"class": OneReceipt.name, "queue": "shop", "args": list(args)}
        return redis().get(keys.unique(locks.unique_digest(job)))

    def test_a_duplicate_inside_the_transaction_is_refused_and_the_lock_outlives_the_commit(self):
        with transaction.atomic():
            first = OneReceipt.perform_async(1)
            self.assertIsNone(OneReceipt.perform_async(1))
            self.assertEqual(self.lock_owner(1), first)
        self.assertEqual(queued_jids(), [first])
        self.assertEqual(self.lock_owner(1), first)  # held while the job waits

    def test_a_rolled_back_push_frees_its_lock(self):
        with self.assertRaises(Rollback), transaction.atomic():
            OneReceipt.perform_async(1)
            raise Rollback
        self.assertIsNone(self.lock_owner(1))
        again = OneReceipt.perform_async(1)
        self.assertIsNotNone(again)  # not refused for a day
        self.assertEqual(queued_jids(), [again])

    def test_a_push_failing_at_commit_frees_its_lock(self):
        redis().set(SHOP, "not a list")  # the queue key of the wrong type: LPUSH fails
        with self.assertLogs("cogworker.contrib.django", "ERROR") as logged, transaction.atomic():
            jid = OneReceipt.perform_async(1)
            self.assertEqual(self.lock_owner(1), jid)
        self.assertIn(f"push after commit failed: Shop::OneReceipt jid={jid}: ", logged.output[0])
        self.assertIsNone(self.lock_owner(1))  # not refused for a day: it never ran
        redis().delete(SHOP)
        again = OneReceipt.perform_async(1)
        self.assertEqual(queued_jids(), [again])

    def test_a_rolled_back_savepoint_frees_only_its_own_pushes_locks(self):
        with transaction.atomic():
            kept = OneReceipt.perform_async(1)
            with self.assertRaises(Rollback), transaction.atomic():
                OneReceipt.perform_async(2)
                raise Rollback
            self.assertIsNone(self.lock_owner(2))
            self.assertEqual(self.lock_owner(1), kept)
        self.assertEqual(queued_jids(), [kept])


class TestCaseConventionTests(FlushedRedis, TestCase):
    """Under TestCase every test is one transaction that never commits: its pushes wait for
    ``captureOnCommitCallbacks(execute=True)``, as any on_commit callback does."""

    def test_the_push_is_an_on_commit_callback(self):
        with self.captureOnCommitCallbacks(execute=True) as callbacks:
            jid = ShipOrder.perform_async(1, "captured")
            self.assertEqual(queued_jids(), [])
        self.assertEqual(len(callbacks), 1)
        self.assertEqual(queued_jids(), [jid])

    def test_without_executing_the_callbacks_nothing_is_pushed(self):
        with self.captureOnCommitCallbacks() as callbacks:
            ShipOrder.perform_async(1, "held")
        self.assertEqual(len(callbacks), 1)
        self.assertEqual(queued(), [])

    def test_the_fake_testing_mode_records_the_job_at_commit(self):
        with testing.fake():
            with self.captureOnCommitCallbacks(execute=True):
                ShipOrder.perform_async(7, "fake")
                self.assertEqual(testing.jobs(ShipOrder), [])
            self.assertEqual([job["args"] for job in testing.jobs(ShipOrder)], [[7, "fake"]])
            self.assertNotIn("after_commit", testing.jobs(ShipOrder)[0])
        testing.clear_all()
        self.assertEqual(queued(), [])


class ConnectionTests(TransactionTestCase):
    """The server middleware runs Django's close_old_connections around each job."""

    def run_job(self, during):
        job = {"jid": "j1", "class": "Shop::ShipOrder", "args": []}
        CloseDatabaseConnections()(None, job, "shop", during)

    def test_it_is_the_outermost_server_middleware(self):
        self.assertIs(next(iter(config().server_middleware)), CloseDatabaseConnections)

    def test_a_connection_is_closed_after_the_job_by_default(self):
        seen = []
        self.run_job(lambda: seen.append(Order.objects.count()))
        self.assertEqual(seen, [0])  # the job could use the database
        self.assertIsNone(connection.connection)

    def test_a_connection_closed_by_the_job_is_not_reused_by_the_next(self):
        Order.objects.count()
        connection.connection.close()  # as if the database had dropped it
        self.run_job(lambda: None)
        self.assertIsNone(connection.connection)
        self.assertEqual(Order.objects.count(), 0)  # a fresh connection

    def test_a_persistent_connection_is_kept_as_django_keeps_it(self):
        connection.close()
        connection.settings_dict["CONN_MAX_AGE"] = None
        try:
            Order.objects.count()
            opened = connection.connection
            self.run_job(lambda: Order.objects.count())
            self.assertIs(connection.connection, opened)
        finally:
            connection.settings_dict["CONN_MAX_AGE"] = 0
            connection.close()

    def test_the_debug_query_log_starts_empty_for_each_job(self):
        connection.queries_log.append({"sql": "select 'an earlier job'", "time": "0.001"})
        seen = []
        self.run_job(lambda: seen.append(len(connection.queries_log)))
        self.assertEqual(seen, [0])

    def test_a_failing_close_is_logged_with_the_jid_and_does_not_fail_the_job(self):
        Order.objects.count()
        transaction.set_autocommit(False)  # a connection left mid-transaction
        original = connection.close

        def broken_close():
            raise RuntimeError("close failed")

        connection.close = broken_close
        try:
            with self.assertLogs("cogworker.contrib.django", "WARNING") as logged:
                self.run_job(lambda: None)
        finally:
            connection.close = original
            transaction.rollback()
            transaction.set_autocommit(True)
        self.assertEqual(len(logged.output), 2)  # before and after
        self.assertIn("jid=j1: RuntimeError: close failed", logged.output[1])


class SettingsTests(SimpleTestCase):
    def test_the_settings_are_the_default_config(self):
        self.assertIs(cogworker.default_config(), config())
        self.assertEqual(config().queues, ["shop", "default"])
        self.assertEqual((config().concurrency, config().shutdown_timeout), (4, 5.0))
        self.assertIsInstance(config().defer_push, AfterCommit)
        self.assertEqual(config().defer_push.using, "default")

    def test_after_commit_false_and_another_database(self):
        off, _ = read_settings({"after_commit": False}, settings.DATABASES)
        self.assertIsInstance(off.defer_push, PushAtOnce)
        self.assertIsNone(off.defer_push.inner)
        other, options = read_settings({"database": "other"}, settings.DATABASES)
        self.assertEqual((other.defer_push.using, options.database), ("other", "other"))

    def test_mistakes_are_refused_naming_the_key(self):
        cases = {
            "unknown option 'concurency' (did you mean 'concurrency'?)": {"concurency": 2},
            "unknown option 'afer_commit' (did you mean 'after_commit'?)": {"afer_commit": 1},
            "concurrency must be a positive integer, got 0": {"concurrency": 0},
            "after_commit must be true or false, got 'no'": {"after_commit": "no"},
            "database must name an alias of settings.DATABASES ('default', 'other'), got "
            "'replica'": {"database": "replica"},
            "defer_push is what after_commit sets": {"defer_push": print},
            "must be a dict of cogworker options, got list": ["concurrency"],
        }
        for message, raw in cases.items():
            with self.subTest(raw=raw), self.assertRaisesMessage(ConfigError, message):
                read_settings(raw, settings.DATABASES)

    def test_your_own_defer_push_is_honoured_with_after_commit_off(self):
        mine, _ = read_settings({"after_commit": False, "defer_push": print}, settings.DATABASES)
        self.assertIs(mine.defer_push.inner, print)


class DiscoveryTests(SimpleTestCase):
    def test_the_apps_with_a_jobs_module_are_found(self):
        self.assertEqual(autodiscover(), ["shop"])
        app = load_jobs("extra_jobs")
        self.assertEqual(app.packages, frozenset({"shop", "extra_jobs"}))
        self.assertIn("Extra::Job", cogworker.registry.known_names())


class DashboardTests(FlushedRedis, TestCase):
    """The dashboard under /admin/cogworker/, behind the staff check (WSGI test client, then
    the ASGI one)."""

    @classmethod
    def setUpTestData(cls):
        cls.staff = User.objects.create_user("boss", is_staff=True)
        cls.customer = User.objects.create_user("customer")

    def test_anonymous_visitors_are_sent_to_the_admin_login(self):
        answer = self.client.get("/admin/cogworker/overview")
        self.assertRedirects(
            answer, "/admin/login/?next=/admin/cogworker/overview", fetch_redirect_response=False
        )

    def test_a_user_who_is_not_staff_is_refused(self):
        self.client.force_login(self.customer)
        self.assertEqual(self.client.get("/admin/cogworker/").status_code, 403)

    def test_staff_see_the_dashboard_with_every_link_under_the_prefix(self):
        redis().lpush(keys.queue("default"), json.dumps({"class": "X", "jid": "1"}))
        redis().sadd(keys.QUEUES, "default")
        self.client.force_login(self.staff)
        page = self.client.get("/admin/cogworker/")
        self.assertEqual(page.status_code, 200)
        text = page.content.decode()
        self.assertIn('<a href="/admin/cogworker/workers">Workers</a>', text)
        self.assertNotRegex(text, r'(href|action|src)="/(?!admin/cogworker)')
        asset = self.client.get(_first(text, '<link rel="stylesheet" href="'))
        self.assertEqual(asset.status_code, 200)

    def test_a_form_post_works_and_a_cross_site_one_is_refused(self):
        redis().sadd(keys.QUEUES, "default")
        self.client.force_login(self.staff)
        action = "/admin/cogworker/overview/default/pause"
        form = {"queue": "default", "layout": "a"}
        refused = self.client.post(action, form, headers={"sec-fetch-site": "cross-site"})
        self.assertEqual(refused.status_code, 403)
        self.assertFalse(redis().sismember(keys.PAUSED_QUEUES, "default"))
        # no Django CSRF token: the dashboard's own same-origin rule guards it
        done = self.client.post(action, form, headers={"sec-fetch-site": "same-origin"})
        self.assertEqual(done.status_code, 303, done.content)
        self.assertEqual(done["location"], "/admin/cogworker/overview?layout=a")
        self.assertTrue(redis().sismember(keys.PAUSED_QUEUES, "default"))
        notice = self.client.get(done["location"]).content.decode()  # its session cookie
        self.assertIn("Queue paused", notice)

    def test_a_replaced_check_decides_instead(self):
        self.assertEqual(self.client.get("/ops/cogworker/").status_code, 302)
        page = self.client.get("/ops/cogworker/", headers={"x-team": "ops"})
        self.assertEqual(page.status_code, 200)
        self.assertIn('<a href="/ops/cogworker/workers">Workers</a>', page.content.decode())

    async def test_under_asgi_too(self):
        await self.async_client.aforce_login(self.staff)
        page = await self.async_client.get("/admin/cogworker/workers")
        self.assertEqual(page.status_code, 200)
        self.assertIn('href="/admin/cogworker/overview', page.content.decode())


# tests/contrib_guard_probes.py's table (this suite runs in the project's own interpreter),
# with the prefix as {p}
PROBES = [
    ("GET", "{p}/overview"),
    ("GET", "{p}"),
    ("GET", "{p}/../{p}/"),
    ("GET", "{p}/./overview"),
    ("GET", "/elsewhere/..{p}/overview"),
    ("GET", "/{p}/"),
    ("GET", "/{p}/overview"),
    ("GET", "{P}/overview"),
    ("GET", "{p}%2Foverview"),
    ("GET", "{p_encoded}%2Foverview"),
    ("GET", "{p}%252Foverview"),
    ("HEAD", "{p}/overview"),
    ("OPTIONS", "{p}/overview"),
    ("OPTIONS", "{p}/assets/app.css"),
    ("GET", "{p}/assets/app.css"),
    ("HEAD", "{p}/assets/app.js"),
    ("GET", "{p}/assets/favicon.svg"),
    ("GET", "{p}/../{p}/assets/app.css"),
    ("GET", "/{p}/assets/app.css"),
]
DASHBOARD_MARKERS = (b"Workers</a>", b"cogworker dashboard", b"<svg")


class GuardProbeTests(FlushedRedis, TestCase):
    """A refused user never reaches the dashboard by a path trick: each request is refused by
    the check (403) or misses the mount (404; Django's slash redirect to the mount; under
    /admin/, the admin's own redirect of a non-staff user to its login page)."""

    @classmethod
    def setUpTestData(cls):
        cls.customer = User.objects.create_user("customer")

    def probe(self, prefix, asked=None):
        """``asked()``: the paths the check was asked about; None: a 403 is the check's."""
        for method, template in PROBES:
            raw = template.format(p=prefix, P=prefix.upper(), p_encoded=prefix.replace("/", "%2F"))
            with self.subTest(method=method, raw=raw):
                before = len(asked()) if asked else 0
                # the environ a WSGI server builds: PATH_INFO decoded, dot segments as sent
                answer = self.client.generic(method, "/", PATH_INFO=unquote(raw))
                checked = len(asked()) > before if asked else answer.status_code == 403
                if answer.status_code == 301:  # APPEND_SLASH: to the mount, behind the check
                    self.assertEqual((answer["location"], checked), (raw + "/", False))
                    continue
                if answer.status_code == 302:  # missed the mount: the admin's catch-all
                    self.assertTrue(answer["location"].startswith("/admin/login/?next="))
                    self.assertEqual((prefix, checked), ("/admin/cogworker", False))
                    continue
                self.assertIn((answer.status_code, checked), [(403, True), (404, False)])
                leaked = [marker for marker in DASHBOARD_MARKERS if marker in answer.content]
                self.assertEqual(leaked, [])

    def test_the_staff_check_is_not_bypassed(self):
        self.client.force_login(self.customer)
        # a 403 here comes from the staff check only (no unsafe method, so no CSRF refusal)
        self.probe("/admin/cogworker")

    def test_a_replaced_check_is_not_bypassed(self):
        self.client.force_login(self.customer)
        OPS_ASKED.clear()
        self.probe("/ops/cogworker", lambda: OPS_ASKED)
        self.assertTrue(OPS_ASKED)  # the table did reach the check


def _first(text, opening):
    start = text.index(opening) + len(opening)
    return text[start : text.index('"', start)]
