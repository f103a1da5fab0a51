"""Standalone reproductions of engine (openvino_genai) bugs ovserve works around; each module's
docstring is written as the upstream bug report."""
