"""Two orders, each pushing its ShipOrder job inside a transaction: the first commits, the
second rolls back. Prints the jids as JSON ({"committed": ..., "rolled_back": ...})."""

import json

from django.core.management.base import BaseCommand
from django.db import transaction

from shop.jobs import ShipOrder
from shop.models import Order


class Rollback(Exception):
    pass


class Command(BaseCommand):
    def add_arguments(self, parser):
        parser.add_argument("marker")

    def handle(self, marker, **options):
        try:
            with transaction.atomic():
                doomed = Order.objects.create(name="doomed")
                rolled_back = ShipOrder.perform_async(doomed.pk, marker)
                raise Rollback
        except Rollback:
            pass
        with transaction.atomic():
            order = Order.objects.create(name="kept")
            committed = ShipOrder.perform_async(order.pk, marker)
        self.stdout.write(json.dumps({"committed": committed, "rolled_back": rolled_back}))
