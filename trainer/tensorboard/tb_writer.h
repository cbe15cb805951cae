// TensorBoard event files, written as TensorFlow's EventsWriter writes them.
//
// A file is a sequence of TFRecords, each framed as
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
//   data | uint32 masked CRC-32C of the data
// whose data is one serialized Event (event.proto). The first record is the
// file_version event "brain.Event:2"; each scalar is one Event holding one
// Summary.Value with simple_value, as torch's SummaryWriter.add_scalar
// writes it, so TensorBoard's EventAccumulator lists it under scalars.
// Messages are encoded by protobuf (event.proto), checksums by ISA-L.
//
// Not thread-safe; one writer per file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ctitan {

// CRC-32C (Castagnoli, as iSCSI): "123456789" -> 0xE3069283.
uint32_t crc32c(const void* data, size_t n);
// TFRecord's mask over a CRC-32C: rotate right by 15, add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);
// One TFRecord: the framing above around `data`.
std::string tfrecord(const std::string& data);

class TensorBoardWriter {
 public:
  // Creates `folder` (with missing parents) and in it
  // events.out.tfevents.<unix time>.<hostname>, and writes the file_version
  // record. Throws InputError, one line naming the folder and what to do,
  // when either cannot be created or written; the folders it created and
  // the file are removed then.
  explicit TensorBoardWriter(const std::string& folder);
  ~TensorBoardWriter();  // close(); errors are not reported from here
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Buffers one scalar event (written as float32, TensorBoard's type for
  // simple_value) until flush().
  void add_scalar(const std::string& tag, double value, int64_t step);
  // Hands what is buffered to the file (write(2)); throws std::runtime_error
  // naming the file when that fails (e.g. the disk is full).
  void flush();
  // flush(), fsync(2), close. Idempotent.
  void close();

  const std::string& path() const { return path_; }

 private:
  void append_event(const std::string& serialized_event);
  int write_pending();  // 0, or the errno of the failed write(2)
  std::string path_;
  int fd_ = -1;
  std::string pending_;
};

}  // namespace ctitan
