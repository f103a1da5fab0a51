"""The generation core: the protocol-neutral input (``conversation``), jobs and their typed
steps (``job``), chat and text-completion preparation. Dialects adapt onto it."""
