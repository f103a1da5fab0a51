"""One ContinuousBatchingPipeline per served model, each in its own process.

``worker`` runs in the child process (it owns the pipeline and the thread that steps it);
``client`` is the asyncio side in the server process.
"""
