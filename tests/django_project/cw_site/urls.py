from django.contrib import admin
from django.urls import path

from cogworker.contrib.django import dashboard_urls

OPS_ASKED = []
"""The paths ``ops_team`` was asked about."""


def ops_team(request):
    """A check that replaces the staff check (the test asks with a header)."""
    OPS_ASKED.append(request.path)
    return request.headers.get("x-team") == "ops"


urlpatterns = [
    path("admin/cogworker/", dashboard_urls()),
    path("admin/", admin.site.urls),
    path("ops/cogworker/", dashboard_urls(check=ops_team, namespace="ops")),
]
