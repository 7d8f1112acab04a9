"""The Loader's documentation: help(Loader) is this text and the list of its arguments
that shardcast.options renders from its table (docs/python.md has the same table)."""

from shardcast import options

PROSE = """\
Registers this rank's job with the server on construction and iterates its batches.

`server` is "HOST:PORT", "unix:PATH", or several replicas of the server:
"HOST:PORT,HOST:PORT" or a name that resolves to several addresses. The rank uses
a replica on its own host first, the others spread by rank, and moves to the next
one (resuming at its next batch, same bytes) when its replica dies or drains.

Job settings left as None take the server's defaults, its flags: for a server started
without job flags, batch_size 32, split "shard", remainder "drop", workers 1, seed 0,
no shuffle (shuffle_shards False, shuffle_buffer 0), block_size 0, transform "center"
with resize 256 and crop 224 (a small crop, e.g. crop=64, makes a CPU trial fast).
repr(loader) and loader.registration show the effective settings after registration.
Every rank of a job must ask for the same. Without `job_id` every run is a new job (rank 0 names it
and shares the name through the torch.distributed process group; a single rank
needs no group); with several ranks and no process group, pass `job_id`. Names (split,
remainder, transform) are the proto's:
split "shard" | "sample", remainder "drop" | "pad", transform "center" | "random".
`dataset` names one of the server's datasets (its --dataset NAME=DIR; None: the
server's "default", or its only one), e.g. a validation set beside the training set.

Members beside the image: `fields=("txt", "json?")` asks for each sample's members by
extension, as webdataset names them ("jpg;png": the first of these the sample has;
a trailing "?": it may be missing). Each batch's `info[i].fields` maps a field's name
("txt", "json", "jpg;png") to the member's bytes as stored in the tar (None where an
optional one is missing, and for padding); a sample without a required field is left
out of the job's plan (loader.registration.left_out counts them). A tuple, never a
bare str. `image=False` asks for the fields alone: nothing is decoded and `images`
is None (None: the server's default, images). Both are part of the job: every rank
asks for the same, and a state_dict resumes only the same job.

DataLoader's keywords: `shuffle=True` is shuffle_shards=True and a shuffle buffer of
1000 samples (split "shard"; webdataset's customary .shuffle(1000)), `shuffle=False`
neither (split "sample" always deals a seeded permutation per epoch); `drop_last=True`
is remainder "drop", `drop_last=False` remainder "pad" (every sample once, the last
batch padded with label -1); `num_workers` is ignored with a warning (the server
decodes); `pin_memory=True` without CUDA warns and goes on unpinned.

Epochs: each iter() streams the next epoch (0, 1, 2, ...), unless set_epoch() or
load_state_dict() chose the position first, or an error (or Ctrl-C) raised by the
iteration ended it mid-epoch: the next iter() then resumes that epoch at the first
batch not handed out, as load_state_dict(state_dict()) would. A peek does not use an
epoch up: after an iterator that handed out no batch, or one batch and was dropped
(`next(iter(loader))`), the next iter() streams the same epoch from its start. Each
epoch yields
exactly len(loader) batches (fewer when resumed mid-epoch: batches_in_epoch).
load_state_dict() also
takes a state of another world size or batch size (split sample): the epoch goes on
from the samples all ranks consumed, dealt over the new ranks (docs/python.md).

Security (docs/deploy.md, "TLS and tokens"): `tls_ca` (a PEM file) connects with TLS
trusting that CA (`tls=True`: TLS trusting the system's roots), `tls_cert` and
`tls_key` add a client certificate (mTLS); `token` is sent as "authorization: Bearer
<token>", default $SHARDCAST_TOKEN.

A sample whose image the server could not decode arrives as a grey substitute
(`info[i].substituted`): with `on_substitute="mask"` (default) its label is -1, as
padding's, so `cross_entropy(..., ignore_index=-1)` leaves it out (`loader.substituted`
counts them in the epoch); `"fail"` raises ShardcastError naming it.

Where images are decoded (docs/python.md, "Decoding on the trainer"): `decode=None`
(default) the server decodes and sends pixels; `decode="cpu"` the server sends each
image as stored with the crop it would have made, and this process decodes it with
the server's own code on `decode_threads` native threads without the GIL: the same
bytes as decode=None; `decode="cuda"` decodes each batch's JPEGs on the current CUDA
device (torchvision's decode_jpeg, nvJPEG) and crops, resizes and flips there: the
same samples and crops, pixels within a few levels of decode=None's (docs/python.md
has the measured tolerance), `images` on the device (PNG, WebP, CMYK or grayscale
JPEG, a damaged file: the CPU decode, `decode_fallbacks`). A sample whose image cannot
be decoded here is the server's
substitute, as it would have been with decode=None. The delivery is part of the job's
fingerprint: a state_dict of decode=None resumes no decode="cpu"|"cuda" job (those
two resume each other). decode="cuda" without CUDA is a ValueError.

`pin_memory=True` (for a CUDA device): each batch's pixels are copied once, without
the GIL, from the buffers they were received in into page-locked memory, so that
`images.to(device, non_blocking=True)` (and normalize) is a DMA. Otherwise `images` is
a view of the received bytes.

Ranks agree before the first batch: on the first iter(), with torch.distributed
initialized (its default group, when its size is world_size) or a `process_group`
given, every rank's job fingerprint, batches per epoch, batch size and world size are
all-gathered (one small all_gather_object, once) and a difference raises
JobChangedError on every rank, naming each rank's values: ranks registered at
replicas with other data or settings never train on mixed batches or hang at an
epoch's end. `check_ranks=False` turns this off.

Every argument is checked here, before anything connects: None means the server's
(or the native client's) default, any other value is used as given or refused with a
TypeError (a wrong type) or ValueError (out of range) naming the argument, the value
and what it takes (the ranges the server and the C++ clients enforce; the list below).

Raises ServerUnavailableError when the server cannot be reached within
`reconnect_deadline` seconds (at once for a failed TLS handshake; StreamTimeoutError,
a kind of it, when a stream delivers nothing for `stream_timeout` seconds and
reconnecting brings nothing within another `stream_timeout`; 0 = never),
JobRefusedError when it refuses the job (the message is the server's and names the
field; code UNAUTHENTICATED for a missing or wrong token), ValueError for a bad
argument. Every wait (registering, next()) ends at once on Ctrl-C
(KeyboardInterrupt) and on close() from another thread (LoaderClosedError). A Loader
belongs to the process that created it: in a forked child every call raises
ForkedProcessError.
"""

LOADER_DOC = PROSE + "\n" + options.docstring_section()
