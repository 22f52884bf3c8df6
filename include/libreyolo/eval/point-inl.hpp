#pragma once
// Definitions of point.hpp (core/api.hpp): included by point.hpp when header-only, compiled once otherwise.
#include <libreyolo/eval/point.hpp>

namespace libreyolo::eval {

LIBREYOLO_INLINE std::vector<torch::Tensor> decode_points(const torch::Tensor& logits, const PointDecodeOptions& o) {
  if (logits.dim() != 4 || logits.size(1) < 2)
    throw Error("decode_points: logits must be [B, 1 + classes, H, W], got " + std::to_string(logits.dim()) + " dims");
  torch::NoGradGuard ng;
  auto probs = logits.detach().to(torch::kFloat32).softmax(1).narrow(1, 1, logits.size(1) - 1);
  auto [score, cls] = probs.max(1);  // [B, H, W]
  score = score.to(torch::kCPU).contiguous();
  cls = cls.to(torch::kCPU).contiguous();
  const int64_t B = score.size(0), H = score.size(1), W = score.size(2);
  std::vector<torch::Tensor> out;
  out.reserve(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const float* s = score[b].data_ptr<float>();
    const int64_t* c = cls[b].data_ptr<int64_t>();
    std::vector<int64_t> cand;
    for (int64_t k = 0; k < H * W; ++k)
      if (s[k] > o.conf) cand.push_back(k);
    std::stable_sort(cand.begin(), cand.end(), [&](int64_t a, int64_t z) { return s[a] > s[z]; });
    std::vector<char> suppressed(static_cast<size_t>(H * W), 0);
    std::vector<float> rows;
    for (int64_t k : cand) {
      if (suppressed[k]) continue;
      const int64_t y = k / W, x = k % W;
      rows.insert(rows.end(), {float(x), float(y), s[k], float(c[k])});
      for (int64_t yy = std::max<int64_t>(0, y - o.radius); yy < std::min(H, y + o.radius + 1); ++yy)
        for (int64_t xx = std::max<int64_t>(0, x - o.radius); xx < std::min(W, x + o.radius + 1); ++xx) suppressed[yy * W + xx] = 1;
      if (o.max_points > 0 && static_cast<int64_t>(rows.size() / 4) >= o.max_points) break;
    }
    const int64_t n = static_cast<int64_t>(rows.size() / 4);
    out.push_back(n == 0 ? torch::zeros({0, 4}) : torch::from_blob(rows.data(), {n, 4}, torch::kFloat32).clone());
  }
  return out;
}

LIBREYOLO_INLINE std::vector<int64_t> assign_min_cost(const std::vector<std::vector<double>>& cost) {
  const size_t n = cost.size();
  if (n == 0) return {};
  const size_t m = cost[0].size();
  if (n > m) {  // transpose: assign columns to rows
    std::vector<std::vector<double>> t(m, std::vector<double>(n));
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < m; ++j) t[j][i] = cost[i][j];
    auto col_row = assign_min_cost(t);
    std::vector<int64_t> row_col(n, -1);
    for (size_t j = 0; j < m; ++j) row_col[static_cast<size_t>(col_row[j])] = static_cast<int64_t>(j);
    return row_col;
  }
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> u(n + 1, 0), v(m + 1, 0);
  std::vector<size_t> p(m + 1, 0), way(m + 1, 0);
  for (size_t i = 1; i <= n; ++i) {
    p[0] = i;
    size_t j0 = 0;
    std::vector<double> minv(m + 1, inf);
    std::vector<char> used(m + 1, 0);
    do {
      used[j0] = 1;
      const size_t i0 = p[j0];
      double delta = inf;
      size_t j1 = 0;
      for (size_t j = 1; j <= m; ++j) {
        if (used[j]) continue;
        const double cur = cost[i0 - 1][j - 1] - u[i0] - v[j];
        if (cur < minv[j]) minv[j] = cur, way[j] = j0;
        if (minv[j] < delta) delta = minv[j], j1 = j;
      }
      for (size_t j = 0; j <= m; ++j) {
        if (used[j]) u[p[j]] += delta, v[j] -= delta;
        else minv[j] -= delta;
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {
      const size_t j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0);
  }
  std::vector<int64_t> row_col(n, -1);
  for (size_t j = 1; j <= m; ++j)
    if (p[j]) row_col[p[j] - 1] = static_cast<int64_t>(j - 1);
  return row_col;
}

LIBREYOLO_INLINE PointMatchResult match_points(const std::vector<PointXY>& pred, const std::vector<double>& scores,
                                               const std::vector<PointXY>& gt, double tolerance) {
  PointMatchResult r;
  const size_t np = pred.size(), ng = gt.size();
  if (scores.size() != np) throw Error("match_points: " + std::to_string(scores.size()) + " scores for " + std::to_string(np) + " points");
  if (np == 0 || ng == 0) {
    r.fp = static_cast<int64_t>(np), r.fn = static_cast<int64_t>(ng);
    return r;
  }
  std::vector<std::vector<double>> dist(np, std::vector<double>(ng));
  std::vector<std::vector<char>> ok(np, std::vector<char>(ng));
  bool any = false;
  for (size_t i = 0; i < np; ++i)
    for (size_t j = 0; j < ng; ++j) {
      dist[i][j] = pred[i].cls == gt[j].cls ? std::hypot(pred[i].x - gt[j].x, pred[i].y - gt[j].y)
                                            : std::numeric_limits<double>::infinity();
      ok[i][j] = std::isfinite(dist[i][j]) && dist[i][j] <= tolerance;
      any = any || ok[i][j];
    }
  if (!any) {
    r.fp = static_cast<int64_t>(np), r.fn = static_cast<int64_t>(ng);
    return r;
  }
  std::vector<double> uniq = scores;
  std::sort(uniq.begin(), uniq.end());
  uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
  const double max_pairs = static_cast<double>(std::min(np, ng));
  const double conf_unit = 0.5 / ((max_pairs + 1.0) * (static_cast<double>(uniq.size()) + 1.0));
  const double dist_unit = conf_unit / (2.0 * (max_pairs + 1.0));
  std::vector<std::vector<double>> cost(np, std::vector<double>(ng, 0.0));
  for (size_t i = 0; i < np; ++i) {
    const double rank = static_cast<double>(std::lower_bound(uniq.begin(), uniq.end(), scores[i]) - uniq.begin()) + 1.0;
    for (size_t j = 0; j < ng; ++j) {
      if (!ok[i][j]) continue;
      const double prox = tolerance > 0 ? std::clamp(1.0 - dist[i][j] / tolerance, 0.0, 1.0) : (dist[i][j] == 0 ? 1.0 : 0.0);
      cost[i][j] = -(1.0 + rank * conf_unit + prox * dist_unit);
    }
  }
  const auto col = assign_min_cost(cost);
  std::vector<char> gt_used(ng, 0);
  for (size_t i = 0; i < np; ++i) {
    const int64_t j = col[i];
    if (j >= 0 && ok[i][static_cast<size_t>(j)]) {
      r.pairs.push_back({static_cast<int64_t>(i), j});
      r.total_distance += dist[i][static_cast<size_t>(j)];
      gt_used[static_cast<size_t>(j)] = 1;
    }
  }
  r.fp = static_cast<int64_t>(np) - r.tp();
  r.fn = static_cast<int64_t>(ng) - r.tp();
  return r;
}

LIBREYOLO_INLINE std::vector<PointXY> grid_points(const torch::Tensor& grid) {
  const auto g = grid.to(torch::kCPU).to(torch::kInt64).contiguous();
  const int64_t H = g.size(0), W = g.size(1);
  const int64_t* d = g.data_ptr<int64_t>();
  std::vector<PointXY> out;
  for (int64_t k = 0; k < H * W; ++k)
    if (d[k] >= 1) out.push_back({double(k % W), double(k / W), d[k] - 1});
  return out;
}

LIBREYOLO_INLINE PointMetrics::PointMetrics(std::vector<double> thresholds,
                                            std::vector<int> radii, double tolerance)
    : tolerance_(tolerance) {
  for (double t : thresholds)
    for (int r : radii) settings_.push_back({t, r, {}});
}

LIBREYOLO_INLINE void PointMetrics::add(const torch::Tensor& logits, const torch::Tensor& grid) {
  if (logits.size(0) != grid.size(0) || logits.size(2) != grid.size(1) || logits.size(3) != grid.size(2))
    throw Error("PointMetrics: logits grid " + std::to_string(logits.size(2)) + "x" + std::to_string(logits.size(3)) +
                " does not match the target grid " + std::to_string(grid.size(1)) + "x" + std::to_string(grid.size(2)));
  const auto lc = logits.detach().to(torch::kCPU).to(torch::kFloat32);
  const auto gc = grid.to(torch::kCPU);
  std::vector<std::vector<PointXY>> gts;
  for (int64_t b = 0; b < gc.size(0); ++b) gts.push_back(grid_points(gc[b]));
  for (auto& s : settings_) {
    const auto dec = decode_points(lc, {s.conf, s.radius, 0});
    for (size_t b = 0; b < dec.size(); ++b) add_image(dec[b], gts[b], s.counts);
  }
}

LIBREYOLO_INLINE void PointMetrics::add_image(const torch::Tensor& rows, const std::vector<PointXY>& gt, PointCounts& c) const {
  std::vector<PointXY> pred;
  std::vector<double> scores;
  auto a = rows.accessor<float, 2>();
  for (int64_t i = 0; i < rows.size(0); ++i) {
    pred.push_back({a[i][0], a[i][1], static_cast<int64_t>(a[i][3])});
    scores.push_back(a[i][2]);
  }
  const auto m = match_points(pred, scores, gt, tolerance_);
  c.tp += m.tp();
  c.fp += m.fp;
  c.fn += m.fn;
  c.total_distance += m.total_distance;
}

LIBREYOLO_INLINE const PointMetrics::Setting& PointMetrics::best() const {
  if (settings_.empty()) throw Error("PointMetrics: no (threshold, radius) setting");
  size_t k = 0;
  for (size_t i = 1; i < settings_.size(); ++i)
    if (settings_[i].counts.f1() > settings_[k].counts.f1()) k = i;
  return settings_[k];
}

}  // namespace libreyolo::eval
