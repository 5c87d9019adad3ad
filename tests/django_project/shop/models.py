from django.db import models


class Order(models.Model):
    name = models.CharField(max_length=100)
    shipped = models.BooleanField(default=False)
