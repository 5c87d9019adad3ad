"""Integrations with the frameworks and services a Python team runs cogworker beside.

Each submodule needs its own extra (``pip install 'cogworker[django]'``...) and is imported
only by the application that uses it: nothing in the core imports this package.
"""
