// Which host each rank of a communicator is on. Ranks on one host share memory and are served by
// Purlin; what crosses hosts is handed to the real NCCL (nccl_shim/fallback.h).
#pragma once

#include <cstdint>
#include <vector>

namespace purlin::snac {

class HostLayout {
 public:
  HostLayout() = default;
  // From every rank's host identity (core/topology.h's host_id), in rank order. Hosts are numbered
  // in the order of their lowest rank, so every rank derives the same numbering.
  static HostLayout from_ids(const std::vector<std::uint64_t>& host_ids);

  int nranks() const { return static_cast<int>(host_of_.size()); }
  int hosts() const { return static_cast<int>(members_.size()); }
  int host_of(int rank) const { return host_of_[rank]; }
  // The ranks on host h, ascending. A rank's position here is its local rank.
  const std::vector<int>& members(int host) const { return members_[host]; }
  int local_rank(int rank) const { return local_of_[rank]; }
  int local_size(int rank) const { return static_cast<int>(members_[host_of_[rank]].size()); }
  bool same_host(int a, int b) const { return host_of_[a] == host_of_[b]; }
  // Every host holds the same number of ranks: the ranks with one local rank, one per host, then
  // form a rail, and a collective can run hierarchically.
  bool uniform() const;
  // The rail of `rank`: the ranks with its local rank, in host order (a rank's index here is its
  // host). Only meaningful when uniform().
  std::vector<int> rail_of(int rank) const;
  // The size of NCCL's load/store-accessible (LSA) teams: the largest number that divides the length
  // of every run of consecutive ranks on one host, and `cap` when it is positive. Every team is then
  // that many consecutive ranks of one host, rank r in team r / size at position r % size.
  int lsa_size(int cap = 0) const;

 private:
  std::vector<int> host_of_;
  std::vector<int> local_of_;
  std::vector<std::vector<int>> members_;
};

}  // namespace purlin::snac
