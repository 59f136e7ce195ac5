"""A small Django project using django-rq, for tests/test_django.py. The Redis URL comes from
``SHOP_REDIS_URL`` (the test's redis-server); ``SHOP_FAIR_ROUTER`` (JSON), when set, becomes ``FAIR_ROUTER``
and ``SHOP_COMMIT_MODE`` django-rq's ``RQ["COMMIT_MODE"]``."""

import json
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "test-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_rq", "shop"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": os.environ.get("SHOP_DB", str(BASE_DIR / "shop.sqlite3"))}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

REDIS_URL = os.environ.get("SHOP_REDIS_URL", "redis://localhost:6379/0")
RQ_QUEUES = {name: {"URL": REDIS_URL} for name in ("default", "fair")}
RQ = {"COMMIT_MODE": os.environ["SHOP_COMMIT_MODE"]} if os.environ.get("SHOP_COMMIT_MODE") else {}
if os.environ.get("SHOP_FAIR_ROUTER"):
    FAIR_ROUTER = json.loads(os.environ["SHOP_FAIR_ROUTER"])
LOGGING = {"version": 1, "disable_existing_loggers": False,
           "handlers": {"console": {"class": "logging.StreamHandler"}},
           "loggers": {"fair_router": {"handlers": ["console"], "level": "INFO"}}}
