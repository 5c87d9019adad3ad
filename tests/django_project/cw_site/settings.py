"""Settings of the Django test project.

Its databases (SQLite files) live in ``$CW_DJANGO_DIR``, a temporary directory each test
makes; ``$CW_DJANGO_COGWORKER`` (JSON) is merged into ``COGWORKER``, so a test can try other
settings; Redis is ``$REDIS_URL`` (the test session's server).
"""

import json
import os
from pathlib import Path

DATA = Path(os.environ["CW_DJANGO_DIR"])

SECRET_KEY = "cw-django-test-" + "s" * 50
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
ROOT_URLCONF = "cw_site.urls"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "cogworker.contrib.django",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DATA / "db.sqlite3",
        "TEST": {"NAME": DATA / "test-db.sqlite3"},  # a file: closing a connection is real
    },
    "other": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DATA / "other.sqlite3",
        "TEST": {"NAME": DATA / "test-other.sqlite3"},
    },
}

COGWORKER = {
    "queues": ["shop", "default"],
    "concurrency": 4,
    "shutdown_timeout": 5,
    **json.loads(os.environ.get("CW_DJANGO_COGWORKER", "{}")),
}
