// The one written fp32 order of operations per optimizer. Scalar C++, AVX2, AVX-512 and CUDA all
// instantiate these templates with their own `Ops`, so every path performs the same correctly
// rounded operations in the same order, and produces the same bits.
//
// An Ops type provides a vector type V and
//   set1(float) mul(a,b) add(a,b) fma(a,b,c)=a*b+c with one rounding  div(a,b)  sqrt(a)  sign(a)
// where div and sqrt are IEEE correctly rounded and sign(a) is -1, 0 or +1 (0 for +-0).
// No header here includes CUDA, SIMD intrinsics or backend code.
#pragma once

#include "core/optim/dtype.h"
#include "core/optim/optimizer.h"

namespace tf::core::rules {

// Step scalars broadcast once per kernel call.
template <class O>
struct Bcast {
  using V = typename O::V;
  V grad_scale, beta1, omb1, beta2, omb2, neg_step_size, inv_sqrt_bc2, eps, decay, l2;
  bool has_l2;
  TF_HD_MEMBER explicit Bcast(const StepScalars& s)
      : grad_scale(O::set1(s.grad_scale)),
        beta1(O::set1(s.beta1)),
        omb1(O::set1(s.one_minus_beta1)),
        beta2(O::set1(s.beta2)),
        omb2(O::set1(s.one_minus_beta2)),
        neg_step_size(O::set1(-s.step_size)),
        inv_sqrt_bc2(O::set1(s.inv_sqrt_bc2)),
        eps(O::set1(s.eps)),
        decay(O::set1(s.decay)),
        l2(O::set1(s.l2)),
        has_l2(s.has_l2 != 0) {}
};

// g = raw gradient (already converted to fp32). Returns the scaled gradient; the caller checks it
// for finiteness and keeps the old state where it is not finite.
template <class O>
TF_HD typename O::V scale_grad(const Bcast<O>& s, typename O::V g_raw) {
  return O::mul(g_raw, s.grad_scale);
}

// AdamW (torch.optim.AdamW): p <- p*(1-lr*wd); m <- b1*m + (1-b1)*g; v <- b2*v + (1-b2)*g^2;
// p <- p - lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)
template <class O>
TF_HD void adamw(const Bcast<O>& s, typename O::V g, typename O::V& p, typename O::V& m, typename O::V& v) {
  m = O::fma(s.beta1, m, O::mul(s.omb1, g));
  v = O::fma(s.beta2, v, O::mul(s.omb2, O::mul(g, g)));
  const typename O::V den = O::fma(O::sqrt(v), s.inv_sqrt_bc2, s.eps);
  p = O::fma(s.neg_step_size, O::div(m, den), O::mul(p, s.decay));
}

// Adam (torch.optim.Adam with weight_decay = L2 into the gradient).
template <class O>
TF_HD void adam(const Bcast<O>& s, typename O::V g, typename O::V& p, typename O::V& m, typename O::V& v) {
  if (s.has_l2) g = O::fma(s.l2, p, g);
  m = O::fma(s.beta1, m, O::mul(s.omb1, g));
  v = O::fma(s.beta2, v, O::mul(s.omb2, O::mul(g, g)));
  const typename O::V den = O::fma(O::sqrt(v), s.inv_sqrt_bc2, s.eps);
  p = O::fma(s.neg_step_size, O::div(m, den), p);
}

// Adagrad (torch.optim.Adagrad): g += wd*p; sum += g^2; p -= clr * g / (sqrt(sum) + eps)
template <class O>
TF_HD void adagrad(const Bcast<O>& s, typename O::V g, typename O::V& p, typename O::V& sum) {
  if (s.has_l2) g = O::fma(s.l2, p, g);
  sum = O::fma(g, g, sum);
  const typename O::V den = O::add(O::sqrt(sum), s.eps);
  p = O::fma(s.neg_step_size, O::div(g, den), p);
}

// Lion (Chen et al. 2023): c = b1*m + (1-b1)*g; p <- p*(1-lr*wd) - lr*sign(c); m <- b2*m + (1-b2)*g
template <class O>
TF_HD void lion(const Bcast<O>& s, typename O::V g, typename O::V& p, typename O::V& m) {
  const typename O::V c = O::fma(s.beta1, m, O::mul(s.omb1, g));
  p = O::fma(s.neg_step_size, O::sign(c), O::mul(p, s.decay));
  m = O::fma(s.beta2, m, O::mul(s.omb2, g));
}

// Dispatch on the optimizer at compile time. state2 is ignored by one-state optimizers.
template <OptimizerKind K, class O>
TF_HD void update(const Bcast<O>& s, typename O::V g, typename O::V& p, typename O::V& s1, typename O::V& s2) {
  if constexpr (K == OptimizerKind::kAdamW) {
    adamw<O>(s, g, p, s1, s2);
  } else if constexpr (K == OptimizerKind::kAdam) {
    adam<O>(s, g, p, s1, s2);
  } else if constexpr (K == OptimizerKind::kAdagrad) {
    (void)s2;
    adagrad<O>(s, g, p, s1);
  } else {
    (void)s2;
    lion<O>(s, g, p, s1);
  }
}

}  // namespace tf::core::rules
