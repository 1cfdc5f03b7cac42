"""One module per ``python -m adapters`` command: ``add_arguments(parser)``, ``main(args)``."""
