"""The command line: the typer app (``app.py``) and everything that talks to the terminal
(``render.py``). Only this package prints, and only it turns errors into exit codes."""
