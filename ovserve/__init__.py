"""ovserve: an OpenVINO-native, OpenAI-compatible model server for Intel edge machines."""

__version__ = "0.1.0"
