"""The command line: ``agentcollapse train|base-model|mi-check|doctor``. It parses arguments, calls the
layers below (``config``, ``run``) and prints their errors as one line; nothing else lives here."""
