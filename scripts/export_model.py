"""Export a Hugging Face model to an OVMS model repository that ``ovserve serve --config_path`` serves.

Takes OVMS's ``export_model.py`` arguments (subcommands ``text_generation``, ``embeddings_ov``,
``rerank_ov``, ``speech2text``, ``text2speech``, ``image_generation``) and runs the same code as
``ovserve export``; see ``ovserve/export/``. Example::

    python scripts/export_model.py text_generation --source_model Qwen/Qwen2.5-0.5B-Instruct \\
        --weight-format int8 --model_repository_path models
    ovserve serve --config_path models/config.json --port 8000
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file (python scripts/export_model.py) from a checkout, ovserve may not be installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ovserve.export import main

if __name__ == "__main__":
    sys.exit(main())
