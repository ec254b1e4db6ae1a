#include "snac/runtime/hosts.h"

#include <numeric>
#include <unordered_map>

namespace purlin::snac {

HostLayout HostLayout::from_ids(const std::vector<std::uint64_t>& host_ids) {
  HostLayout l;
  std::unordered_map<std::uint64_t, int> index;
  l.host_of_.resize(host_ids.size());
  l.local_of_.resize(host_ids.size());
  for (std::size_t r = 0; r < host_ids.size(); ++r) {
    auto [it, fresh] = index.emplace(host_ids[r], static_cast<int>(l.members_.size()));
    if (fresh) l.members_.emplace_back();
    const int h = it->second;
    l.host_of_[r] = h;
    l.local_of_[r] = static_cast<int>(l.members_[h].size());
    l.members_[h].push_back(static_cast<int>(r));
  }
  return l;
}

bool HostLayout::uniform() const {
  for (const auto& m : members_)
    if (m.size() != members_.front().size()) return false;
  return true;
}

std::vector<int> HostLayout::rail_of(int rank) const {
  std::vector<int> rail;
  const int l = local_of_[rank];
  for (const auto& m : members_)
    if (l < static_cast<int>(m.size())) rail.push_back(m[l]);
  return rail;
}

int HostLayout::lsa_size(int cap) const {
  int size = cap > 0 ? cap : 0;
  int run = 0;
  for (int r = 0; r < nranks(); ++r) {
    if (r > 0 && host_of_[r] != host_of_[r - 1]) {
      size = std::gcd(size, run);
      run = 0;
    }
    ++run;
  }
  size = std::gcd(size, run);
  return size > 0 ? size : 1;
}

}  // namespace purlin::snac
