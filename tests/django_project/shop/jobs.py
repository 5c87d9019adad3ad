"""The shop's jobs, found by the worker's autodiscovery."""

import os

import cogworker
from shop.models import Order


class ShipOrder(cogworker.Job, queue="shop"):
    """Marks the order shipped (reading the committed row) and records its run in Redis."""

    name = "Shop::ShipOrder"

    def perform(self, order_id, marker):
        order = Order.objects.get(pk=order_id)
        order.shipped = True
        order.save()
        cogworker.default_config().redis().rpush(f"test:shipped:{marker}", self.jid)


class AuditJob(cogworker.Job, queue="shop", after_commit=False):
    """Pushed at once, even inside a transaction (the class keyword)."""

    name = "Shop::Audit"

    def perform(self, marker):
        cogworker.default_config().redis().rpush(f"test:audit:{marker}", self.jid)


class OneReceipt(cogworker.Job, queue="shop", unique="until_executed"):
    name = "Shop::OneReceipt"

    def perform(self, order_id):
        pass


@cogworker.default_config().configure_server
def _in_the_worker(config):
    # runs only if the worker imported this module after it became a worker (server=True)
    config.redis().set("test:configure_server", os.getpid())
