# The graph sources that ONNX import, graph passes and task extraction need: the main build's
# tunefarm_graph library and the fuzz build's tf_fuzz_graph (tests/fuzz) both take this list,
# so an operator file added here reaches both (a file missing from one list linked in one build
# and not the other).
set(TF_GRAPH_FRONTEND_SRCS
  graph.cc ops.cc ops_elementwise.cc ops_nn.cc ops_shape.cc ops_layout.cc ops_resize.cc ops_conv_transpose.cc ops_einsum.cc ops_scan.cc
  onnx_import.cc import_control_flow.cc import_recurrent.cc import_quantize.cc import_norms.cc import_functions.cc import_window3d.cc memory_budget.cc
  pass.cc pass_dead_code_elimination.cc pass_fold_constants.cc pass_eliminate_common_subexpressions.cc
  pass_simplify_inference.cc pass_fold_scale_into_conv.cc pass_recognize_composites.cc pass_combine_parallel_matmuls.cc pass_lower_conv_transpose.cc pass_lower_scatter_nd.cc pass_pad_convs.cc pass_trim_conv_taps.cc pass_split_conv_regions.cc pass_einsum_to_matmul.cc
  pass_transform_conv_layout.cc pass_pad_channels.cc pass_fold_qdq.cc pass_int8_edges.cc pass_auto_mixed_precision.cc pass_fuse_attention.cc
  tasks.cc image_loop.cc fusion.cc memory_plan.cc npy.cc node_te.cc te_kit.cc te_elementwise.cc te_shape.cc te_nn.cc)
