// Moving the disaggregation roles' cache between the nodes of one instance over the node
// control stream (docs/design.md, "Prefill and decode across nodes"). Node 0 runs the transfer
// endpoint and holds a pool for every global rank (its own, and host staging pools for the
// other nodes' ranks: TpModelGroup::make_remote_pools):
// - decode: prefill wrote every rank's share on node 0; forward_region sends each follower
//   its ranks' pages and KDA slice (kCache) ahead of the first step that reads them;
// - prefill: the followers' ranks computed their share; fetch_region asks each follower for it
//   (kFetch), which answers with kCache frames and kFetchDone, before the send reads it.
#pragma once

#include <chrono>

#include "pdserve/model/tp_group.h"
#include "pdserve/transfer/node_link.h"

namespace pdserve::server {

// Node 0 (decode): the share of ranks local..tp-1 of `region`, from the staging pools.
Status forward_region(transfer::node::LeaderLink& link, TpModelGroup& g, int local, const CacheRegion& region);
// Node 0 (prefill): the same share, from the followers into the staging pools.
Status fetch_region(transfer::node::LeaderLink& link, TpModelGroup& g, int local, const CacheRegion& region,
                    std::chrono::milliseconds timeout);

// Pipeline stages on several nodes (prefill): node 0's whole-model pools get every other
// node's stages' layers of `region` (each follower answers for the layers it holds, every TP
// rank of them).
Status fetch_stage_region(transfer::node::LeaderLink& link, TpModelGroup& g, int nnodes, const CacheRegion& region,
                          std::chrono::milliseconds timeout);
// A follower holding pipeline stages: its stages' layers of `f`'s region, every TP rank.
Status answer_stage_fetch(transfer::node::FollowerLink& link, TpModelGroup& g, const transfer::node::Fetch& f);

// A follower (decode): one kCache frame into its ranks' host pools (`first` = its first
// global rank); the page or slot is added to `pending` (uploaded before the next step).
Status apply_cache(TpModelGroup& g, int first, const transfer::node::CacheData& m, CacheRegion* pending);
// A follower (prefill): downloads `f`'s region from the device (if any) and sends its ranks'
// share back, then kFetchDone.
Status answer_fetch(transfer::node::FollowerLink& link, TpModelGroup& g, int first, const transfer::node::Fetch& f);

}  // namespace pdserve::server
