"""OVMS export_model.py's graph.pbtxt: as it writes it, and for other option sets (its fixed text
around a given options body)."""

from __future__ import annotations

# What OVMS's export_model.py writes for a text generation model with a draft model.
OVMS_EXPORTED_GRAPH = """input_stream: "HTTP_REQUEST_PAYLOAD:input"
output_stream: "HTTP_RESPONSE_PAYLOAD:output"

node: {
  name: "LLMExecutor"
  calculator: "HttpLLMCalculator"
  input_stream: "LOOPBACK:loopback"
  input_stream: "HTTP_REQUEST_PAYLOAD:input"
  input_side_packet: "LLM_NODE_RESOURCES:llm"
  output_stream: "LOOPBACK:loopback"
  output_stream: "HTTP_RESPONSE_PAYLOAD:output"
  input_stream_info: {
    tag_index: 'LOOPBACK:0',
    back_edge: true
  }
  node_options: {
      [type.googleapis.com / mediapipe.LLMCalculatorOptions]: {
          models_path: "./",
          plugin_config: '{"KV_CACHE_PRECISION": "u8"}',
          enable_prefix_caching: false,
          cache_size: 10,
          max_num_seqs: 256,
          device: "CPU",
          # Speculative decoding configuration
          draft_models_path: "./tiny-draft",
      }
  }
  input_stream_handler {
    input_stream_handler: "SyncSetInputStreamHandler",
    options {
      [mediapipe.SyncSetInputStreamHandlerOptions.ext] {
        sync_set {
          tag_index: "LOOPBACK:0"
        }
      }
    }
  }
}"""

_OPEN = "LLMCalculatorOptions]: {\n"
_CLOSE = "      }\n  }"


def ovms_graph(options_block: str) -> str:
    """OVMS_EXPORTED_GRAPH (what export_model.py writes) with another LLMCalculatorOptions body."""
    head, rest = OVMS_EXPORTED_GRAPH.split(_OPEN, 1)
    return head + _OPEN + options_block + rest[rest.index(_CLOSE) :]
