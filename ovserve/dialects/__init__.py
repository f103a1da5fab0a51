"""One package per API dialect a client speaks: its request models, its adapter onto the
generation core (``ovserve.core``), its response models. Nothing outside a dialect knows its shapes."""
