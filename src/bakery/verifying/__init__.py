"""What runs in bakery's own process when a series' tests are run: the verify plan
(``plan.py``: one frozen value built one way for every command), the test environments
(``environments.py``: a small registry, as pre-commit's languages), and the runner that
starts pytest (``runner.py``). What runs inside pytest is :mod:`bakery.testing`.
"""
