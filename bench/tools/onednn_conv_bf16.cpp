// Probe for issue 34: oneDNN's float32 vs bfloat16 1-D convolution at the boundary CNN's main
// layer (64 -> 64 channels, kernel 7, 350 positions, ReLU), batch 64, one thread, plain (ncw) and
// channels-last (nwc) layouts, back to back in one run. Prints the implementation oneDNN chose and
// the time per call. Not part of the build:
//   g++ -O2 -std=c++17 bench/tools/onednn_conv_bf16.cpp -ldnnl -o /tmp/onednn_conv_bf16
//   DNNL_NUM_THREADS=1 OMP_NUM_THREADS=1 /tmp/onednn_conv_bf16
#include <dnnl.hpp>

#include <chrono>
#include <cstdio>

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

double ms_per_call(dt in, tag layout) {
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const dnnl::memory::dim n = 64, c = 64, w = 350, k = 7;
  const dnnl::memory::desc src({n, c, w}, in, layout), dst({n, c, w}, dt::f32, layout);
  const dnnl::memory::desc weights({c, c, k}, in, tag::any), bias({c}, dt::f32, tag::x);
  const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                          src, weights, bias, dst, {1}, {0}, {3}, {3});
  dnnl::post_ops relu;
  relu.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(relu);
  const dnnl::convolution_forward::primitive_desc pd(d, attr, eng);
  std::printf("%s %s: %s\n", in == dt::f32 ? "f32 " : "bf16", layout == tag::nwc ? "nwc" : "ncw", pd.impl_info_str());
  dnnl::memory ms(pd.src_desc(), eng), mw(pd.weights_desc(), eng), mb(bias, eng), md(pd.dst_desc(), eng);
  dnnl::convolution_forward conv(pd);
  auto run = [&] {
    conv.execute(s, {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}});
    s.wait();
  };
  run();
  const auto t0 = std::chrono::steady_clock::now();
  int calls = 0;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 2.0) {
    run();
    ++calls;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls * 1e3;
}

}  // namespace

int main() {
  for (tag layout : {tag::ncw, tag::nwc}) {
    const double f32 = ms_per_call(dt::f32, layout), bf16 = ms_per_call(dt::bf16, layout);
    std::printf("  f32 %.3f ms, bf16 %.3f ms per call: bf16 %.2fx\n", f32, bf16, f32 / bf16);
  }
}
