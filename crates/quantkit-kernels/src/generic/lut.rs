//! `generic_lut_u8`: a 256-entry byte table applied in place, the reference of the SIMD
//! table kernels.

/// `data[i] = table[data[i]]` for every byte.
pub fn generic_lut_u8(table: &[u8; 256], data: &mut [u8]) {
    for b in data {
        *b = table[*b as usize];
    }
}
