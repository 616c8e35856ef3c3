// Whether the POD5 reader and writer register POD5's Arrow extension types in the process.
#pragma once

namespace escpod::pod5 {

// Whether opening a FileReader or FileWriter registers POD5's Arrow extension types
// (minknow.uuid, minknow.vbz) with the process's Arrow library (default true; reading and
// writing work either way). Programs sharing libarrow with pyarrow, such as the Python module,
// turn it off before the first open: a registered type changes what pyarrow, and so the official
// pod5 package, reads from every POD5 file in the process (pod5 then takes VBZ signal for
// uncompressed and fails). Thread-safe.
void set_register_arrow_extension_types(bool enabled);

}  // namespace escpod::pod5
