"""ONNX's own node tests (onnx.backend.test) against tgc's backend, unchanged.

By default a fast subset (FAST below, the in-scope ops' basic cases) runs; TGC_ONNX=all runs the whole node
suite. Every exclusion is in exclusions.txt with its reason."""
import os, pytest
onnx = pytest.importorskip('onnx', reason="the onnx package is not installed (pip install -e '.[onnx]')")
import onnx.backend.test
from tgc.frontend import onnx as tgc_onnx

HERE = os.path.dirname(__file__)
FAST = ['test_add_bcast', 'test_sub_example', 'test_mul_bcast', 'test_div_example', 'test_pow_example', 'test_neg_example',
        'test_abs', 'test_sqrt_example', 'test_reciprocal_example', 'test_exp_example', 'test_log_example', 'test_erf',
        'test_tanh_example', 'test_sigmoid_example', 'test_hardsigmoid_example', 'test_hardswish', 'test_relu',
        'test_leakyrelu_example', 'test_elu_example', 'test_gelu_default_1', 'test_clip_example', 'test_where_example',
        'test_equal', 'test_less', 'test_greater', 'test_not_2d', 'test_cast_FLOAT_to_DOUBLE', 'test_cast_no_saturate_FLOAT_to_FLOAT8E5M2', 'test_castlike_no_saturate_FLOAT16_to_FLOAT8E4M3FN_expanded', 'test_min_example', 'test_max_example',
        'test_sum_example', 'test_mean_example', 'test_matmul_2d', 'test_gemm_default_matrix_bias', 'test_basic_conv_with_padding',
        'test_convtranspose', 'test_batchnorm_example', 'test_layer_normalization_2d_axis0', 'test_instancenorm_example',
        'test_maxpool_2d_default', 'test_averagepool_2d_pads', 'test_globalaveragepool', 'test_softmax_example',
        'test_logsoftmax_example_1', 'test_reduce_sum_keepdims_example', 'test_reduce_mean_default_axes_keepdims_example',
        'test_reduce_max_keepdims_example', 'test_reduce_min_keepdims_example', 'test_argmax_default_axis_example',
        'test_reshape_reduced_dims', 'test_transpose_default', 'test_flatten_axis1', 'test_squeeze', 'test_unsqueeze_axis_0',
        'test_concat_2d_axis_0', 'test_split_equal_parts_1d_opset18', 'test_slice', 'test_gather_0', 'test_expand_dim_changed',
        'test_constant_pad', 'test_tile', 'test_shape', 'test_size', 'test_range_float_type_positive_delta', 'test_constantofshape_float_ones',
        'test_constant', 'test_identity', 'test_dropout_default', 'test_triu', 'test_resize_upsample_scales_nearest',
        'test_resize_upsample_scales_linear',
        # the ops beyond scope.py's SCOPE, one basic case each
        'test_gather_elements_0', 'test_cumsum_1d', 'test_cumprod_1d', 'test_cumsum_1d_reverse_exclusive', 'test_cumprod_1d_int32_exclusive',
        'test_cumsum_2d_negative_axis', 'test_top_k', 'test_scatter_elements_with_axis', 'test_scatternd',
        'test_gathernd_example_int32', 'test_hardmax_example', 'test_einsum_batch_matmul', 'test_onehot_with_axis',
        'test_bitshift_right_uint8', 'test_bitshift_left_int8_overflow', 'test_acos', 'test_asin', 'test_atan', 'test_sinh', 'test_cosh',
        'test_asinh', 'test_acosh', 'test_atanh', 'test_lpnormalization_default', 'test_lppool_2d_default', 'test_lrn',
        'test_maxunpool_export_without_output_shape', 'test_eyelike_populate_off_main_diagonal', 'test_compress_0', 'test_nonzero_example',
        'test_reversesequence_time', 'test_isinf', 'test_isnan', 'test_bitwise_and_i32_2d', 'test_bitwise_not_2d',
        'test_maxpool_with_argmax_2d_precomputed_pads', 'test_resize_upsample_scales_cubic', 'test_batchnorm_example_training_mode',
        'test_convtranspose_output_shape', 'test_loop11', 'test_scan9_sum', 'test_range_float_type_positive_delta_expanded',
        'test_simple_rnn_defaults', 'test_gru_defaults', 'test_lstm_defaults',
        'test_quantizelinear_axis', 'test_quantizelinear_e4m3fn', 'test_attention_4d_fp16', 'test_causal_conv_with_state_silu_fp16', 'test_dequantizelinear_blocked', 'test_qlinearmatmul_2D_uint8_float32', 'test_qlinearconv', 'test_matmulinteger',
        'test_convinteger_with_padding', 'test_gridsample_bicubic_align_corners_0_additional_1', 'test_identity_sequence', 'test_identity_opt',
        'test_sequence_insert_at_back', 'test_split_to_sequence_1', 'test_sequence_map_add_2_sequences', 'test_optional_has_element_empty_optional_input',
        'test_dft', 'test_stft', 'test_bitcast_float32_to_int32', 'test_adam', 'test_adagrad', 'test_momentum', 'test_flexattention',
        'test_ai_onnx_ml_binarizer', 'test_ai_onnx_ml_array_feature_extractor', 'test_col2im', 'test_det_nd', 'test_tensorscatter_circular']

def exclusions() -> list[str]:
  out = []
  for line in open(os.path.join(HERE, 'exclusions.txt')):
    pat = line.split('#', 1)[0].strip()
    if pat: out.append(pat)
  return out

backend_test = onnx.backend.test.BackendTest(tgc_onnx.backend(), __name__)
for pat in exclusions(): backend_test.exclude(pat)
if os.environ.get('TGC_ONNX') != 'all':
  for name in FAST: backend_test.include(f'^{name}_cpu$')
else:
  backend_test.include(r'^test_.*_cpu$')
# the node tests only: the real-model tests download their models
OnnxBackendNodeModelTest = backend_test.test_cases['OnnxBackendNodeModelTest']
