"""The ear of a worker process for remote commands: ``quiet``, ``resume`` and ``stop``.

A thread subscribes to ``cogworker:signal:<identity>`` on a connection of its own (again a
second after it failed). Pub/sub keeps nothing for a subscriber that isn't there, so a
command sent while the thread was not subscribed (an outage, a fail-over) would be lost: the
sender (``api.Process.signal``) also keeps the last command in the process's presence hash
(``wire.SIGNAL_FIELD``), and each time the thread has subscribed it takes that one.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from cogworker import connection, keys, redis_errors, wire
from cogworker.worker.identity import pid_of

if TYPE_CHECKING:
    from redis.client import PubSub

    from cogworker.config import Config

logger = logging.getLogger("cogworker")


class SignalListener:
    def __init__(
        self,
        config: Config,
        identity: str,
        client: redis.Redis,
        on_signal: Callable[[str], None],
        supervisor: str | None = None,
    ) -> None:
        """``client``: for the kept command (the subscription has its own connection);
        ``supervisor``: the identity of the swarm supervisor that forked this process."""
        self.config = config
        self.identity = identity
        self.supervisor = supervisor
        self._client = client
        self._on_signal = on_signal
        self._stopping = threading.Event()
        self._pubsub_client: redis.Redis | None = None
        self.subscribed = threading.Event()
        self.thread = threading.Thread(target=self._listen, name="signals", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self.thread.is_alive():
            self.thread.join(2.0)
        if self._pubsub_client is not None:
            self._pubsub_client.close()

    def _listen(self) -> None:
        while not self._stopping.is_set():
            self._listen_once()
            if not self._stopping.is_set():
                self._stopping.wait(1.0)

    def _listen_once(self) -> None:
        """One subscription, on a connection of its own, until it fails or we stop."""
        client = connection.connect(
            self.config.redis_url,
            max_connections=1,
            socket_timeout=5.0,
            # no retry at all, not even the one redis-py makes inside a failing read, which
            # re-subscribes on a new connection that we then close: for that moment Redis
            # counts a subscriber, and a command PUBLISH says was heard is lost
            retry=Retry(NoBackoff(), 0, supported_errors=()),
        )
        self._pubsub_client = client
        # typed only from redis-py 8.2 on; the ignore stays for the older releases allowed
        pubsub = client.pubsub()  # type: ignore[no-untyped-call,unused-ignore]
        try:
            self._subscribe(pubsub)
            self._take_kept()
            while not self._stopping.is_set():
                message = pubsub.get_message(timeout=1.0)
                if message and message.get("type") == "message":
                    self._heard(str(message.get("data")))
        except Exception as error:
            self.subscribed.clear()
            if not self._stopping.is_set():
                redis_errors.reporter.report("Signals", error)
        finally:
            # never leave a subscription nobody reads: a message sent to it would be lost
            pubsub.close()
            client.close()

    def _subscribe(self, pubsub: PubSub) -> None:
        """Subscribe, and wait until Redis confirms: from then on every command sent reaches
        us here, so the one kept in our presence can be taken."""
        pubsub.subscribe(keys.signal_channel(self.identity))
        confirmed = pubsub.get_message(timeout=5.0)
        if not confirmed or confirmed.get("type") != "subscribe":
            raise redis.ConnectionError(f"no confirmation of the subscription: {confirmed!r}")
        redis_errors.reporter.recovered("Signals")
        self.subscribed.set()

    def _take_kept(self) -> None:
        """The last command sent to us is kept in our presence (``api.Process.signal``):
        one sent while we weren't subscribed (its pub/sub message is lost) is heard now."""
        try:
            kept = self._client.hget(keys.process(self.identity), wire.SIGNAL_FIELD)
        except redis.RedisError as error:  # pub/sub still works: keep listening
            redis_errors.reporter.report("Signals (kept command)", error)
            return
        if kept is not None:
            self._heard(str(kept))

    def _heard(self, message: str) -> None:
        """Act on ``message``, then drop the kept command: it is this one, or one sent since,
        while we were subscribed, whose pub/sub message reaches us too."""
        self._handle(message)
        try:
            self._client.hdel(keys.process(self.identity), wire.SIGNAL_FIELD)
        except redis.RedisError as error:  # heard again when we next subscribe: harmless
            redis_errors.reporter.report("Signals (kept command)", error)

    def _handle(self, message: str) -> None:
        if message == wire.SWARM_STOP:
            if self._ask_supervisor_to_stop():
                return
            message = "stop"  # no supervisor to ask: stop alone
        if message in wire.SIGNAL_COMMANDS:
            logger.info("Received remote %s, identity=%s", message, self.identity)
            self._on_signal(message)
        else:
            logger.warning("Unknown signal message: %s", message)

    def _ask_supervisor_to_stop(self) -> bool:
        """Pass a stop meant for the whole swarm to our supervisor as TERM (it stops every
        child and forks no more). False when we have none, or it is gone (we were
        re-parented)."""
        pid = pid_of(self.supervisor) if self.supervisor else None
        if pid is None or os.getppid() != pid:
            return False
        logger.info(
            "Received remote stop of the swarm, identity=%s: passing it to supervisor pid=%d",
            self.identity,
            pid,
        )
        os.kill(pid, signal.SIGTERM)
        return True
