// Writes seed inputs for frame_fuzz: one valid frame of each kind.
#include <cstdio>
#include <fstream>
#include <string>

#include "transport/frame.h"
#include "transport/message.h"
#include "transport/schema/handshake.capnp.h"

using namespace troupe::transport;

static void write(const std::string& dir, const std::string& name, const Frame& f) {
  std::vector<std::byte> bytes = encode_frame(f);
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: frame_seeds DIR\n");
    return 2;
  }
  std::string dir = argv[1];
  {
    capnp::MallocMessageBuilder b;
    auto hello = b.initRoot<schema::Hello>();
    hello.setProtocolVersion(1);
    hello.setPeerName("worker 127.0.0.1:7000");
    hello.initNonce(32);
    Frame f{FrameKind::kHello, to_buffer(b), {}};
    write(dir, "hello", f);
  }
  {
    capnp::MallocMessageBuilder b;
    b.initRoot<schema::Proof>().initMac(32);
    write(dir, "proof", Frame{FrameKind::kProof, to_buffer(b), {}});
  }
  {
    capnp::MallocMessageBuilder b;
    auto v = b.initRoot<schema::Verdict>();
    v.setAccepted(false);
    v.setReason("wrong token");
    write(dir, "verdict", Frame{FrameKind::kVerdict, to_buffer(b), {}});
  }
  {
    Frame f{FrameKind::kData, Buffer(), {}};
    f.buffers.emplace_back(3);
    f.buffers.emplace_back(0);
    f.buffers.emplace_back(17);
    for (auto& buf : f.buffers) {
      for (size_t i = 0; i < buf.size(); ++i)
        buf.data()[i] = std::byte{0x5a};
    }
    write(dir, "data_buffers", f);
  }
  write(dir, "close", Frame{FrameKind::kClose, Buffer(), {}});
  return 0;
}
