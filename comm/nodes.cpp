// The node layout: shared-memory split or declared blocks, and its restriction to groups.
#include "comm/nodes.hpp"

#include <algorithm>
#include <map>

#include "base/error.hpp"
#include "comm/bootstrap.hpp"

namespace uipc {

int NodeLayout::nodes() const {
  int n = 0;
  for (int v : node_of) n = std::max(n, v + 1);
  return n;
}

int NodeLayout::ranks_per_node() const {
  const int n = nodes();
  if (n == 0) return 0;
  std::vector<int> count(static_cast<size_t>(n), 0);
  for (int v : node_of) ++count[static_cast<size_t>(v)];
  for (int c : count)
    if (c != count[0]) return 0;
  return count[0];
}

bool NodeLayout::equal_blocks() const {
  const int per = ranks_per_node();
  if (per == 0) return false;
  for (int r = 0; r < size(); ++r)
    if (node_of[static_cast<size_t>(r)] != r / per || local_index[static_cast<size_t>(r)] != r % per) return false;
  return true;
}

std::string NodeLayout::source() const {
  return declared_ranks_per_node > 0 ? "declared: --ranks-per-node " + std::to_string(declared_ranks_per_node)
                                     : "mpi shared-memory split";
}

std::string NodeLayout::describe() const {
  const int n = nodes(), per = ranks_per_node();
  std::string s = std::to_string(n) + (n == 1 ? " node" : " nodes");
  if (per > 0)
    s += n == 1 ? " of " + std::to_string(per) + (per == 1 ? " rank" : " ranks") : " x " + std::to_string(per) + (per == 1 ? " rank" : " ranks");
  else
    s += " of unequal sizes";
  return s + " (" + source() + ")";
}

NodeLayout NodeLayout::of(MPI_Comm sub, MPI_Comm parent) const {
  const std::vector<int> theirs = ranks_in(sub, parent);
  const int n = static_cast<int>(theirs.size());
  NodeLayout out;
  out.declared_ranks_per_node = declared_ranks_per_node;
  std::map<int, int> renumber, count;  // parent node -> sub node; sub node -> ranks so far
  for (int i = 0; i < n; ++i) {
    const int p = theirs[static_cast<size_t>(i)];
    UIPC_CHECK(p != MPI_UNDEFINED && p >= 0 && p < size(), "NodeLayout::of: a rank of the group is not in the parent");
    const int node = node_of[static_cast<size_t>(p)];
    auto it = renumber.emplace(node, static_cast<int>(renumber.size())).first;
    out.node_of.push_back(it->second);
    out.local_index.push_back(count[it->second]++);
  }
  return out;
}

NodeLayout discover_nodes(MPI_Comm world, int ranks_per_node, double timeout_s) {
  int size = 0, rank = 0;
  UIPC_MPI_CHECK(MPI_Comm_size(world, &size));
  UIPC_MPI_CHECK(MPI_Comm_rank(world, &rank));
  // The shared-memory node of every rank, named by its lowest rank.
  MPI_Comm shared_raw;
  UIPC_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared_raw));
  MpiComm shared(shared_raw);
  int leader = rank;
  {
    std::vector<int> members(static_cast<size_t>(shared.size()));
    allgather_bounded(shared.get(), &rank, sizeof(int), members.data(), timeout_s, "the node discovery");
    leader = *std::min_element(members.begin(), members.end());
  }
  std::vector<int> leaders(static_cast<size_t>(size));
  allgather_bounded(world, &leader, sizeof(int), leaders.data(), timeout_s, "the node discovery");

  NodeLayout real;
  std::map<int, int> index, count;
  for (int r = 0; r < size; ++r) {
    auto it = index.emplace(leaders[static_cast<size_t>(r)], static_cast<int>(index.size())).first;
    real.node_of.push_back(it->second);
    real.local_index.push_back(count[it->second]++);
  }
  if (ranks_per_node <= 0) return real;

  // Declared nodes: every rank computes the same verdict from the same data.
  if (size % ranks_per_node != 0)
    throw InputError("--ranks-per-node " + std::to_string(ranks_per_node) + ": the run has " + std::to_string(size) +
                     " rank(s), not a multiple of it");
  NodeLayout declared;
  declared.declared_ranks_per_node = ranks_per_node;
  for (int r = 0; r < size; ++r) {
    const int node = r / ranks_per_node, first = node * ranks_per_node;
    if (real.node_of[static_cast<size_t>(r)] != real.node_of[static_cast<size_t>(first)])
      throw InputError("--ranks-per-node " + std::to_string(ranks_per_node) + ": declared node " +
                       std::to_string(node) + " holds ranks " + std::to_string(first) + " and " + std::to_string(r) +
                       ", which run on different hosts (a declared node must lie within one host)");
    declared.node_of.push_back(node);
    declared.local_index.push_back(r % ranks_per_node);
  }
  return declared;
}

}  // namespace uipc
