"""The schema OVMS graphs are parsed against, built at run time (no protoc): the subset of
MediaPipe's ``CalculatorGraphConfig`` that OVMS graphs use, and the node options of each OVMS
calculator ovserve serves: ``LLMCalculatorOptions`` (src/llm/llm_calculator.proto),
``EmbeddingsCalculatorOVOptions``, ``RerankCalculatorOVOptions``, ``S2tCalculatorOptions`` (and the
older ``SttCalculatorOptions``), ``T2sCalculatorOptions`` and ``ImageGenCalculatorOptions``
(src/image_gen/image_gen_calculator.proto). The text format names fields, so only names and types
matter here; field numbers follow OVMS's protos.

Contract: :data:`GRAPH_CLASS` is the graph message class; :data:`OPTIONS_CLASSES` maps each
calculator options type to its message class; ``ovserve.settings.graph`` reads them.
"""

from __future__ import annotations

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL, _REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_TYPES = {
    "string": _F.TYPE_STRING,
    "bool": _F.TYPE_BOOL,
    "uint64": _F.TYPE_UINT64,
    "uint32": _F.TYPE_UINT32,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "float": _F.TYPE_FLOAT,
}

# LLMCalculatorOptions as OVMS declares it: (name, number, type). Messages/enums are ".qualified".
LLM_OPTIONS_FIELDS: list[tuple[str, int, str]] = [
    ("models_path", 1, "string"),
    ("max_num_batched_tokens", 2, "uint64"),
    ("cache_size", 3, "uint64"),
    ("max_num_seqs", 4, "uint64"),
    ("dynamic_split_fuse", 5, "bool"),
    ("device", 6, "string"),
    ("plugin_config", 7, "string"),
    ("best_of_limit", 8, "uint32"),
    ("max_tokens_limit", 9, "uint32"),
    ("enable_prefix_caching", 10, "bool"),
    ("draft_models_path", 11, "string"),
    ("draft_device", 12, "string"),
    ("draft_max_num_batched_tokens", 13, "uint64"),
    ("draft_cache_size", 14, "uint64"),
    ("draft_block_size", 15, "uint64"),
    ("draft_max_num_seqs", 16, "uint64"),
    ("draft_dynamic_split_fuse", 17, "bool"),
    ("draft_eagle3_mode", 18, "bool"),
    ("pipeline_type", 19, ".mediapipe.LLMCalculatorOptions.PipelineType"),
    ("cache_eviction_config", 20, ".mediapipe.LLMCalculatorOptions.Opaque"),
    ("tool_parser", 21, "string"),
    ("reasoning_parser", 22, "string"),
    ("enable_tool_guided_generation", 23, "bool"),
    ("sparse_attention_config", 24, ".mediapipe.LLMCalculatorOptions.Opaque"),
    ("cache_interval_multiplier", 25, "uint64"),
    ("chat_template_mode", 26, ".mediapipe.LLMCalculatorOptions.ChatTemplateMode"),
    ("generation_config_path", 27, "string"),
    # Written by older OVMS export scripts; still accepted (see LEGACY_OPTIONS).
    ("response_parser", 1001, "string"),
    ("block_size", 1002, "uint64"),
]
PIPELINE_TYPES = ("LM", "VLM", "LM_CB", "VLM_CB", "AUTO")

# OVMS's EmbeddingsCalculatorOVOptions (src/embeddings) and RerankCalculatorOVOptions (src/rerank).
# The text format names fields, so only names and types matter here.
_EMBEDDINGS_OPTIONS_FIELDS: list[tuple[str, int, str]] = [
    ("models_path", 1, "string"),
    ("normalize_embeddings", 2, "bool"),
    ("target_device", 3, "string"),
    ("plugin_config", 4, "string"),
    ("pooling", 5, ".mediapipe.EmbeddingsCalculatorOVOptions.Pooling"),
    ("truncate", 6, "bool"),
    ("max_position_embeddings", 7, "uint32"),
    ("max_allowed_chunks", 8, "uint64"),
    # ovserve's own: OVMS has no such option (a graph using it is ovserve-only).
    ("matryoshka_embeddings", 1001, "bool"),
]
_RERANK_OPTIONS_FIELDS: list[tuple[str, int, str]] = [
    ("models_path", 1, "string"),
    ("max_allowed_chunks", 2, "uint64"),
    ("max_position_embeddings", 3, "uint32"),
    ("target_device", 4, "string"),
    ("plugin_config", 5, "string"),
]
POOLING_TYPES = ("CLS", "LAST", "MEAN")
# OVMS's S2tCalculatorOptions (src/audio/speech_to_text/s2t_calculator.proto) and the
# SttCalculatorOptions of earlier releases (stt_calculator.proto, "device" for "target_device").
_S2T_OPTIONS_FIELDS: list[tuple[str, int, str]] = [
    ("models_path", 1, "string"),
    ("target_device", 2, "string"),
    ("plugin_config", 3, "string"),
    ("enable_word_timestamps", 4, "bool"),
]
# OVMS's T2sCalculatorOptions (src/audio/text_to_speech/t2s_calculator.proto); "voices" is a
# repeated {name, path} (speaker embedding files).
_T2S_OPTIONS_FIELDS: list[tuple[str, int, str]] = [
    ("models_path", 1, "string"),
    ("target_device", 2, "string"),
    ("plugin_config", 3, "string"),
]
_STT_OPTIONS_FIELDS: list[tuple[str, int, str]] = [
    ("models_path", 1, "string"),
    ("device", 2, "string"),
    ("plugin_config", 3, "string"),
]


# OVMS's ImageGenCalculatorOptions; "lora_adapters" and "composite_lora_adapters" are repeated
# messages, added in _build_pool.
# OVMS's LoraLoadMode, by number: how a LoRA adapter is loaded (DYNAMIC: switched per request).
LORA_LOAD_MODES = ("DYNAMIC", "STATIC", "FUSE")
_IMAGE_GEN_OPTIONS_FIELDS: list[tuple[str, int, str]] = [
    ("models_path", 1, "string"),
    ("device", 2, "string"),
    ("plugin_config", 3, "string"),
    ("max_resolution", 4, "string"),
    ("default_resolution", 5, "string"),
    ("max_num_images_per_prompt", 6, "uint64"),
    ("default_num_inference_steps", 7, "uint64"),
    ("max_num_inference_steps", 8, "uint64"),
    ("resolution", 9, "string"),
    ("num_images_per_prompt", 10, "int64"),
    ("guidance_scale", 11, "float"),
    # ovserve's own: OVMS has no such option (a graph using it is ovserve-only).
    ("max_pixel_steps", 1001, "uint64"),
]


def _field(name: str, number: int, type_name: str, label: int = _OPTIONAL) -> descriptor_pb2.FieldDescriptorProto:
    proto = _F(name=name, number=number, label=label)
    if type_name in _TYPES:
        proto.type = _TYPES[type_name]
    elif type_name.endswith(("PipelineType", "ChatTemplateMode", "Pooling", "LoraLoadMode")):
        proto.type = _F.TYPE_ENUM
        proto.type_name = type_name
    else:
        proto.type = _F.TYPE_MESSAGE
        proto.type_name = type_name
    return proto


def _message(name: str, fields: list[descriptor_pb2.FieldDescriptorProto]) -> descriptor_pb2.DescriptorProto:
    return descriptor_pb2.DescriptorProto(name=name, field=fields)


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(any_pb2.DESCRIPTOR.serialized_pb))
    f = descriptor_pb2.FileDescriptorProto(name="ovserve/mediapipe_subset.proto", package="mediapipe", syntax="proto2")
    f.dependency.append("google/protobuf/any.proto")

    options = _message("MediaPipeOptions", [])
    options.extension_range.add(start=20000, end=536870912)
    sync_set = _message("SyncSet", [_field("tag_index", 1, "string", _REPEATED)])
    sync_options = _message(
        "SyncSetInputStreamHandlerOptions", [_field("sync_set", 1, ".mediapipe.SyncSet", _REPEATED)]
    )
    sync_options.extension.append(
        _F(name="ext", number=97718271, label=_OPTIONAL, type=_F.TYPE_MESSAGE,
           type_name=".mediapipe.SyncSetInputStreamHandlerOptions", extendee=".mediapipe.MediaPipeOptions")
    )  # fmt: skip
    handler = _message(
        "InputStreamHandlerConfig",
        [_field("input_stream_handler", 1, "string"), _field("options", 3, ".mediapipe.MediaPipeOptions")],
    )
    stream_info = _message("InputStreamInfo", [_field("tag_index", 1, "string"), _field("back_edge", 2, "bool")])
    node = _message(
        "Node",
        [
            _field("name", 1, "string"),
            _field("calculator", 2, "string"),
            _field("input_stream", 3, "string", _REPEATED),
            _field("output_stream", 4, "string", _REPEATED),
            _field("input_side_packet", 5, "string", _REPEATED),
            _field("output_side_packet", 6, "string", _REPEATED),
            _field("node_options", 8, ".google.protobuf.Any", _REPEATED),
            _field("source_layer", 9, "int32"),
            _field("buffer_size_hint", 10, "int32"),
            _field("input_stream_handler", 11, ".mediapipe.InputStreamHandlerConfig"),
            _field("output_stream_handler", 12, ".mediapipe.InputStreamHandlerConfig"),
            _field("input_stream_info", 13, ".mediapipe.InputStreamInfo", _REPEATED),
            _field("executor", 14, "string"),
            _field("max_in_flight", 16, "int32"),
        ],
    )
    graph = _message(
        "CalculatorGraphConfig",
        [
            _field("node", 1, ".mediapipe.Node", _REPEATED),
            _field("num_threads", 8, "int32"),
            _field("input_stream", 10, "string", _REPEATED),
            _field("output_stream", 15, "string", _REPEATED),
            _field("input_side_packet", 16, "string", _REPEATED),
            _field("output_side_packet", 17, "string", _REPEATED),
            _field("max_queue_size", 11, "int32"),
            _field("report_deadlock", 12, "bool"),
            _field("input_stream_handler", 13, ".mediapipe.InputStreamHandlerConfig"),
            _field("output_stream_handler", 14, ".mediapipe.InputStreamHandlerConfig"),
            _field("package", 19, "string"),
            _field("type", 20, "string"),
        ],
    )
    llm = _message("LLMCalculatorOptions", [_field(*spec) for spec in LLM_OPTIONS_FIELDS])
    llm.nested_type.append(_message("Opaque", []))
    llm.enum_type.append(
        descriptor_pb2.EnumDescriptorProto(
            name="PipelineType",
            value=[descriptor_pb2.EnumValueDescriptorProto(name=n, number=i) for i, n in enumerate(PIPELINE_TYPES)],
        )
    )
    llm.enum_type.append(
        descriptor_pb2.EnumDescriptorProto(
            name="ChatTemplateMode",
            value=[descriptor_pb2.EnumValueDescriptorProto(name=n, number=i) for i, n in enumerate(("MINJA", "JINJA"))],
        )
    )
    embeddings = _message("EmbeddingsCalculatorOVOptions", [_field(*spec) for spec in _EMBEDDINGS_OPTIONS_FIELDS])
    embeddings.enum_type.append(
        descriptor_pb2.EnumDescriptorProto(
            name="Pooling",
            value=[descriptor_pb2.EnumValueDescriptorProto(name=n, number=i) for i, n in enumerate(POOLING_TYPES)],
        )
    )
    rerank = _message("RerankCalculatorOVOptions", [_field(*spec) for spec in _RERANK_OPTIONS_FIELDS])
    s2t = _message("S2tCalculatorOptions", [_field(*spec) for spec in _S2T_OPTIONS_FIELDS])
    stt = _message("SttCalculatorOptions", [_field(*spec) for spec in _STT_OPTIONS_FIELDS])
    t2s = _message("T2sCalculatorOptions", [_field(*spec) for spec in _T2S_OPTIONS_FIELDS])
    t2s.field.append(
        descriptor_pb2.FieldDescriptorProto(
            name="voices",
            number=4,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
            type_name=".mediapipe.T2sCalculatorOptions.SpeakerEmbeddings",
        )
    )
    t2s.nested_type.append(_message("SpeakerEmbeddings", [_field("name", 1, "string"), _field("path", 2, "string")]))
    image_gen = _message("ImageGenCalculatorOptions", [_field(*spec) for spec in _IMAGE_GEN_OPTIONS_FIELDS])
    image_gen.field.extend(
        [
            _field("lora_adapters", 12, ".mediapipe.LoraAdapterEntry", _REPEATED),
            _field("composite_lora_adapters", 13, ".mediapipe.CompositeLoraAdapterEntry", _REPEATED),
        ]
    )
    lora = _message(
        "LoraAdapterEntry",
        [
            _field("alias", 1, "string"),
            _field("path", 2, "string"),
            _field("alpha", 3, "float"),
            _field("mode", 4, ".mediapipe.LoraLoadMode"),
        ],
    )
    f.enum_type.append(
        descriptor_pb2.EnumDescriptorProto(
            name="LoraLoadMode",
            value=[descriptor_pb2.EnumValueDescriptorProto(name=n, number=i) for i, n in enumerate(LORA_LOAD_MODES)],
        )
    )
    component = _message("CompositeLoraComponent", [_field("adapter_alias", 1, "string"), _field("alpha", 2, "float")])
    composite = _message(
        "CompositeLoraAdapterEntry",
        [_field("alias", 1, "string"), _field("components", 2, ".mediapipe.CompositeLoraComponent", _REPEATED)],
    )
    calculators = [llm, embeddings, rerank, s2t, stt, t2s, image_gen, lora, component, composite]
    f.message_type.extend([options, sync_set, sync_options, handler, stream_info, node, graph, *calculators])
    pool.Add(f)
    return pool


POOL = _build_pool()
GRAPH_CLASS = message_factory.GetMessageClass(POOL.FindMessageTypeByName("mediapipe.CalculatorGraphConfig"))
