#include "attn/verify/cases.hpp"

#include <cmath>
#include <algorithm>
#include <sstream>

namespace attn::props {

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();
const char* mask_kind_name(MaskKind m) {
  switch (m) {
    case MaskKind::none: return "none";
    case MaskKind::causal: return "causal";
    case MaskKind::window: return "window";
    case MaskKind::keypad: return "keypad";
    case MaskKind::boolean: return "bool";
    case MaskKind::bias: return "bias";
  }
  return "?";
}
const char* magnitude_name(Magnitude m) {
  switch (m) {
    case Magnitude::unit: return "unit";
    case Magnitude::tiny: return "tiny";
    case Magnitude::large: return "large";
    case Magnitude::near_limit: return "near_limit";
  }
  return "?";
}
}  // namespace

Inputs<double> Case::inputs(double max_storage, double max_accumulate) const {
  Inputs<double> in = random_inputs(shape, seed, magnitude == Magnitude::near_limit ? 1.0 : logit_scale);
  if (magnitude == Magnitude::near_limit) {
    double max_q = 0, max_k = 0;
    for (double x : in.q) max_q = std::max(max_q, std::fabs(x));
    for (double x : in.k) max_k = std::max(max_k, std::fabs(x));
    // Half the format's largest value, but |Q.K| must stay 8x below what A holds.
    const double target = std::min(max_storage / 2, max_accumulate / (8 * max_k * double(shape.d_k)));
    const double factor = std::min(target / max_q, 1e4 * std::sqrt(double(shape.d_k)));  // fp32/fp64: logits <= ~1e4
    for (double& x : in.q) x *= factor;
  }
  return in;
}

Options Case::options() const {
  Options opt;
  opt.block_q = block_q;
  opt.block_k = block_k;
  opt.threads = threads;
  switch (mask) {
    case MaskKind::none: break;
    case MaskKind::causal: opt.mask = mask::Causal{}; break;
    case MaskKind::window: opt.mask = mask::SlidingWindow{window}; break;
    case MaskKind::keypad: opt.mask = mask::KeyPadding{valid_length}; break;
    case MaskKind::boolean:
    case MaskKind::bias: {
      NormalStream normal(seed ^ 0x5eedu);
      auto allowed = xt::xtensor<std::uint8_t, 2>::from_shape({shape.n_q, shape.n_kv});
      auto bias = xt::xtensor<double, 2>::from_shape({shape.n_q, shape.n_kv});
      for (std::size_t i = 0; i < shape.n_q; ++i)
        for (std::size_t j = 0; j < shape.n_kv; ++j) {
          const bool visible = i != masked_row && (j < masked_keys_begin || j >= masked_keys_end) &&
                               normal.next() > -1.0;  // ~84% visible
          allowed(i, j) = visible;
          bias(i, j) = visible ? 2 * normal.next() : -std::numeric_limits<double>::infinity();
        }
      if (mask == MaskKind::boolean) opt.mask = mask::Boolean{allowed};
      else opt.mask = mask::AdditiveBias{bias};
      break;
    }
  }
  opt.softcap = softcap;
  opt.kv_splits = kv_splits;
  NormalStream normal(seed ^ 0x51a5u);
  if (sinks != Sinks::none) {
    opt.sinks = xt::xtensor<double, 1>::from_shape({shape.heads});
    for (std::size_t h = 0; h < shape.heads; ++h)
      (*opt.sinks)(h) = sinks == Sinks::some_minus_inf && h % 2 == 0 ? -inf : 2 * normal.next();
  }
  if (alibi == Alibi::geometric) opt.alibi_slopes = alibi_slopes(shape.heads);
  if (alibi == Alibi::random) {
    opt.alibi_slopes = xt::xtensor<double, 1>::from_shape({shape.heads});
    for (std::size_t h = 0; h < shape.heads; ++h) (*opt.alibi_slopes)(h) = 0.5 * normal.next();
  }
  if (documents > 0) {
    // `documents` runs per batch row, cut at random tokens; with
    // documents_split every third run takes the id of the run two before it
    // (one document in two pieces, another between them)
    Segments seg = Segments::from_shape({shape.batch, shape.n_kv});
    for (std::size_t b = 0; b < shape.batch; ++b) {
      std::vector<std::size_t> cuts;
      for (std::size_t d = 1; d < documents && shape.n_kv > 1; ++d)
        cuts.push_back(1 + std::size_t(std::fabs(normal.next()) * 1e6) % (shape.n_kv - 1));
      std::sort(cuts.begin(), cuts.end());
      std::int64_t run = 0;
      for (std::size_t j = 0; j < shape.n_kv; ++j) {
        while (std::size_t(run) < cuts.size() && cuts[std::size_t(run)] == j) ++run;  // duplicate cuts: one run
        seg(b, j) = documents_split && run % 3 == 2 ? run - 2 : run;
      }
    }
    opt.segments = seg;
  }
  return opt;
}

Case Case::plain() const {
  Case c = *this;
  c.shape.heads = shape.heads;
  c.shape.kv_heads = 0;
  c.softcap.reset();
  c.sinks = Sinks::none;
  c.alibi = Alibi::none;
  c.documents = 0;
  c.documents_split = false;
  return c;
}

bool Case::has_masked_rows() const {
  switch (mask) {
    case MaskKind::causal: return shape.n_q > shape.n_kv;
    case MaskKind::window: return shape.n_q > shape.n_kv;
    case MaskKind::keypad:
      return std::find(valid_length.begin(), valid_length.end(), 0u) != valid_length.end();
    case MaskKind::boolean:
    case MaskKind::bias:
      return masked_row < shape.n_q || (masked_keys_begin == 0 && masked_keys_end >= shape.n_kv);
    default: return false;
  }
}

std::string describe(const Case& c) {
  std::ostringstream os;
  os << to_string(c.shape) << " mask=" << mask_kind_name(c.mask);
  if (c.mask == MaskKind::window) os << ":" << c.window;
  if (c.mask == MaskKind::keypad) {
    os << ":[";
    for (std::size_t b = 0; b < c.valid_length.size(); ++b) os << (b ? "," : "") << c.valid_length[b];
    os << "]";
  }
  if (c.mask == MaskKind::boolean || c.mask == MaskKind::bias)
    os << " (masked row " << c.masked_row << ", masked keys [" << c.masked_keys_begin << ", " << c.masked_keys_end
       << "))";
  if (c.shape.kv_head_count() != c.shape.heads) os << " (grouped: g=" << c.shape.group() << ")";
  if (c.softcap) os << " softcap=" << *c.softcap;
  if (c.sinks != Case::Sinks::none) os << " sinks=" << (c.sinks == Case::Sinks::random ? "random" : "some -inf");
  if (c.alibi != Case::Alibi::none) os << " alibi=" << (c.alibi == Case::Alibi::geometric ? "geometric" : "random");
  if (c.documents) os << " documents=" << c.documents << (c.documents_split ? " (split)" : "");
  if (c.kv_splits) os << " kv_splits=" << c.kv_splits;
  os << " magnitude=" << magnitude_name(c.magnitude) << " logit_scale=" << c.logit_scale
     << " accumulate=" << accumulate_name(c.policy) << " block_q=" << c.block_q  << " block_k=" << c.block_k
     << " threads=" << c.threads << " seed=" << c.seed;
  return os.str();
}

void showValue(const Case& c, std::ostream& os) { os << describe(c); }

void classify(const Case& c) {
  RC_TAG(mask_kind_name(c.mask));
  RC_TAG(magnitude_name(c.magnitude));
  RC_CLASSIFY(c.shape.n_q != c.shape.n_kv, "cross-attention");
  RC_CLASSIFY(c.shape.d_k != c.shape.d_v, "d_k != d_v");
  RC_CLASSIFY(c.has_masked_rows(), "fully masked rows");
  RC_CLASSIFY(c.block_k > 0 && c.shape.n_kv % c.block_k != 0, "ragged key blocks");
  RC_CLASSIFY(c.shape.kv_head_count() != c.shape.heads, "grouped K/V heads");
  RC_CLASSIFY(c.softcap.has_value(), "soft-capped");
  RC_CLASSIFY(c.sinks != Case::Sinks::none, "sinks");
  RC_CLASSIFY(c.alibi != Case::Alibi::none, "ALiBi");
  RC_CLASSIFY(c.documents > 0, "documents");
}

rc::Gen<Case> gen_case(double cost_budget, bool allow_masks) {
  return rc::gen::exec([cost_budget, allow_masks] {
    Case c;
    const int size = std::max(1, *rc::gen::withSize([](int s) { return rc::gen::just(s); }));
    auto extent = [&](std::size_t hi) { return *rc::gen::inRange<std::size_t>(1, 1 + std::min<std::size_t>(hi, 3 * size + 2)); };
    c.shape.batch = *rc::gen::inRange<std::size_t>(1, 3);
    c.shape.heads = *rc::gen::inRange<std::size_t>(1, 3);
    // grouped K/V heads in a quarter of the cases: H = g H_kv, g in 2 .. 8 (past 4: a decode step's rows
    // go four at a time, simd/variant.inc)
    if (*rc::gen::inRange(0, 4) == 0) {
      const std::size_t g = *rc::gen::inRange<std::size_t>(2, 9);
      c.shape.kv_heads = c.shape.heads;
      c.shape.heads *= g;
    }
    c.shape.n_q = extent(300);
    c.shape.n_kv = extent(300);
    c.shape.d_k = *rc::gen::inRange<std::size_t>(1, 2 + std::min(256, 3 * size));
    c.shape.d_v = *rc::gen::inRange<std::size_t>(1, 2 + std::min(256, 3 * size));
    // Keep B H n_q n_kv (d_k + d_v + 100) within the budget by trimming d, then n.
    auto cost = [&] {
      return double(c.shape.batch * c.shape.heads * c.shape.n_q * c.shape.n_kv) * double(c.shape.d_k + c.shape.d_v + 100);
    };
    while (cost() > cost_budget && (c.shape.d_k > 1 || c.shape.d_v > 1)) {
      c.shape.d_k = std::max<std::size_t>(1, c.shape.d_k / 2);
      c.shape.d_v = std::max<std::size_t>(1, c.shape.d_v / 2);
    }
    while (cost() > cost_budget) {
      c.shape.n_q = std::max<std::size_t>(1, c.shape.n_q / 2);
      c.shape.n_kv = std::max<std::size_t>(1, c.shape.n_kv / 2);
    }

    c.mask = allow_masks ? *rc::gen::element(MaskKind::none, MaskKind::causal, MaskKind::window, MaskKind::keypad,
                                             MaskKind::boolean, MaskKind::bias)
                         : MaskKind::none;
    if (c.mask == MaskKind::window) c.window = *rc::gen::inRange<std::size_t>(1, c.shape.n_kv + 1);
    if (c.mask == MaskKind::keypad)
      for (std::size_t b = 0; b < c.shape.batch; ++b)
        c.valid_length.push_back(*rc::gen::inRange<std::size_t>(0, c.shape.n_kv + 1));
    if (c.mask == MaskKind::boolean || c.mask == MaskKind::bias) {
      c.masked_row = *rc::gen::inRange<std::size_t>(0, c.shape.n_q + 1);  // n_q: no fully masked row
      c.masked_keys_begin = *rc::gen::inRange<std::size_t>(0, c.shape.n_kv + 1);
      c.masked_keys_end = *rc::gen::inRange<std::size_t>(c.masked_keys_begin, c.shape.n_kv + 1);
    }

    c.magnitude = *rc::gen::element(Magnitude::unit, Magnitude::unit, Magnitude::tiny, Magnitude::large,
                                    Magnitude::near_limit);
    if (c.magnitude == Magnitude::tiny) c.logit_scale = 1e-3;
    if (c.magnitude == Magnitude::large) c.logit_scale = std::pow(10.0, double(*rc::gen::inRange(1, 5)));
    c.policy = *rc::gen::element(Accumulate::fp32, Accumulate::fp32, Accumulate::fp64, Accumulate::storage);
    c.block_q = *rc::gen::element<std::size_t>(0, 0, 1, 3, 16, 17, 64, 512);
    c.block_k = *rc::gen::element<std::size_t>(0, 0, 1, 5, 16, 31, 64, 512);
    c.threads = *rc::gen::element<std::size_t>(1, 1, 2, 3);
    c.seed = *rc::gen::inRange<std::uint64_t>(0, 1u << 20);
    c.kv_splits = *rc::gen::element<std::size_t>(0, 0, 0, 0, 1, 2, 3, 5);
    if (*rc::gen::inRange(0, 4) == 0) c.softcap = *rc::gen::element(0.5, 5.0, 30.0, 50.0);
    if (*rc::gen::inRange(0, 4) == 0) c.sinks = *rc::gen::element(Case::Sinks::random, Case::Sinks::some_minus_inf);
    if (*rc::gen::inRange(0, 4) == 0) c.alibi = *rc::gen::element(Case::Alibi::geometric, Case::Alibi::random);
    if (allow_masks && *rc::gen::inRange(0, 4) == 0) {
      c.documents = *rc::gen::inRange<std::size_t>(1, 9);
      c.documents_split = *rc::gen::inRange(0, 4) == 0;
    }
    return c;
  });
}

}  // namespace attn::props
