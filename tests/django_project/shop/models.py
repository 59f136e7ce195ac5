"""An order: the row a transaction writes beside the job it enqueues."""

from django.db import models


class Order(models.Model):
    tenant = models.CharField(max_length=64)
    job_id = models.CharField(max_length=64, blank=True)
