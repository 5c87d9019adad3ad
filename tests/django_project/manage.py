#!/usr/bin/env python
"""The Django test project's manage.py (tests/test_contrib_django*.py run it)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cw_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
