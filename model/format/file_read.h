/* file_read.h: the one way model/ (and ext/) open a file that comes from
 * outside: a model directory's config.json and vocab.txt, its
 * model.safetensors, train()'s "vocab" option.
 *
 * Rules, the same for every file:
 *   - The file is opened with O_RDONLY | O_NONBLOCK | O_CLOEXEC, so opening a
 *     FIFO never waits for a writer, and the opened descriptor is fstat()ed:
 *     anything but a regular file (a FIFO, a device such as /dev/zero, a
 *     directory, a socket) is refused with an error naming the file and what
 *     it is. A symlink is followed; it is its target that is checked.
 *   - A file larger than its cap is refused before it is read, with its size
 *     and the cap in the error ("'m/config.json' is 2.1 GB; at most 4 MB is
 *     read"). Reading stops at cap + 1 bytes, so a file that grows while it is
 *     read is refused too, and memory stays bounded by the cap.
 *   - Errors are SM_ERR_IO (cannot open, not a regular file, too large, read
 *     error) or SM_ERR_NOMEM with a message in err; never exit or abort.
 *
 * Caps (real files are far below them):
 *   SM_FILE_MAX_CONFIG      4 MiB: config.json and other JSON configs (a BERT
 *                           config.json is about 1 KB, with id2label a few KB).
 *   SM_FILE_MAX_VOCAB     256 MiB: vocab.txt and tokenizer files (bert-base-
 *                           chinese vocab.txt is 110 KB, XLM-R tokenizer.json
 *                           17 MB).
 *   SM_FILE_MAX_WEIGHTS    64 GiB: model.safetensors, which is mapped, not
 *                           read; BERT-large in F32 is 1.3 GB, XLM-R large
 *                           2.2 GB. What is used is bounded by the format
 *                           (header size, tensor ranges inside the file) and
 *                           by the parameter arena the config sizes.
 */
#ifndef SM_FILE_READ_H
#define SM_FILE_READ_H

#include <stddef.h>
#include <stdint.h>

#define SM_FILE_MAX_CONFIG ((uint64_t)4 << 20)
#define SM_FILE_MAX_VOCAB ((uint64_t)256 << 20)
#define SM_FILE_MAX_WEIGHTS ((uint64_t)64 << 30)

/* Opens path as above and checks it is a regular file of at most max_bytes.
 * On success *fd is the open descriptor (the caller closes it) and *size
 * the file's size from fstat. */
int sm_file_open(const char *path, uint64_t max_bytes, int *fd, uint64_t *size, char *err);

/* Reads the whole of path (a regular file of at most max_bytes) into *buf,
 * malloc'd, NUL-terminated after its *len bytes. On failure *buf is NULL. */
int sm_file_read(const char *path, uint64_t max_bytes, char **buf, size_t *len, char *err);

/* Formats a byte count for an error message: "512 bytes", "4 MB", "2.1 GB"
 * (binary units, one decimal where it is not whole). Returns out. */
const char *sm_file_size_text(uint64_t bytes, char *out, size_t cap);

#endif
