// A client that opens a session, registers a fresh shm segment in it,
// prints "<region id> <shm name> <session id>" on one line and then sleeps
// until it is killed. regions_process_test SIGKILLs it and watches the
// daemon release the session's regions.
//
//   session_holder unix:/path/to.sock
#include <cstdio>
#include <iostream>

#include "absl/time/clock.h"
#include "client/client.h"
#include "client/regions/registered_region.h"
#include "client/regions/shared_memory_segment.h"
#include "client/session.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: session_holder TARGET\n";
    return 2;
  }
  auto client = matmul::Client::Create(argv[1], {.wait_for_ready = true});
  if (!client.ok()) {
    std::cerr << client.status() << "\n";
    return 1;
  }
  auto session = matmul::Session::Open(**client, "session_holder");
  if (!session.ok()) {
    std::cerr << "OpenSession: " << session.status() << "\n";
    return 1;
  }
  auto segment = matmul::SharedMemorySegment::Create(1 << 20);
  if (!segment.ok()) {
    std::cerr << segment.status() << "\n";
    return 1;
  }
  auto region =
      matmul::RegisteredRegion::RegisterShm(**client, **session, **segment);
  if (!region.ok()) {
    std::cerr << "RegisterRegion: " << region.status() << "\n";
    return 1;
  }
  // Unlinked now, so the kill leaves nothing behind in /dev/shm: the
  // object lives on only in the daemon's mapping, until it is released.
  (*segment)->Unlink();
  std::cout << (*region)->id() << " " << (*segment)->name() << " "
            << (*session)->session_id() << std::endl;
  for (;;) absl::SleepFor(absl::Hours(1));
}
