// A custom op as TensorFlow's "Create an op" guide has users write one: an op library that
// tf.load_op_library loads into the exporting process. tests/test_op_libraries.py compiles it
// with g++ against the installed TensorFlow's headers (tf.sysconfig's flags).
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;

REGISTER_OP("GraphservePlusOne")
    .Input("x: float")
    .Output("y: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return OkStatus();
    });

class PlusOne : public OpKernel {
 public:
  explicit PlusOne(OpKernelConstruction* context) : OpKernel(context) {}
  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    auto in = x.flat<float>();
    auto out = y->flat<float>();
    for (int i = 0; i < in.size(); ++i) out(i) = in(i) + 1.0f;
  }
};

REGISTER_KERNEL_BUILDER(Name("GraphservePlusOne").Device(DEVICE_CPU), PlusOne);
