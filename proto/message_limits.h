// The farm's message size limit, apart from the gRPC headers (credentials.h) so that the
// board's runner, which speaks framed protobuf over a pipe and no gRPC, need not link gRPC.
#pragma once

namespace tf::farm {

// The largest message either side accepts: uploads are at most this big.
constexpr int kMaxMessageBytes = 256 * 1024 * 1024;

}  // namespace tf::farm
