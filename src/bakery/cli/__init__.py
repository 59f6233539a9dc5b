"""The command line: the typer app (``app.py``), where its parsing departs from click's
(``parsing.py``), everything that talks to the terminal (``render.py``) and the next-step
commands it prints (``hints.py``). Only this package prints, and only it turns errors into
exit codes."""
