//! The model: a tiny pre-norm transformer over `CLASSES` tokens, with learned positions,
//! trained with AdamW on the global batch that the ranks' tensors make up.

use candle_core::backprop::GradStore;
use candle_core::{D, DType, Device, Tensor, Var};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};
use zephon_candle::Tensors;
use zephon_operator::{Digest, RngKey};

use crate::data::Feed;
use crate::{Res, SEQ};

const DIM: usize = 64;
const HEADS: usize = 4;
const LAYERS: usize = 2;
/// The model's vocabulary: GPT-2 ids below `CLASSES - 1` are their own token, rarer ones share
/// the last, in the input and in the targets. GPT-2 numbers tokens in BPE merge order, roughly
/// frequency order, so common tokens keep their identity. The full 50257-token vocabulary
/// (embeddings, softmax, AdamW over 3.2M embedding weights) would make a CPU step about 6x
/// as slow.
const CLASSES: usize = 4096;

/// One step's loss and, for zephon feeds, the global step fingerprint.
#[derive(Clone, Copy)]
pub(crate) struct Point {
    pub(crate) loss: f64,
    pub(crate) fingerprint: Option<Digest>,
}

/// Initial weights on the host, drawn once so that every run starts from the same model.
pub(crate) struct Params(Vec<(Vec<usize>, Vec<f32>)>);

impl Params {
    pub(crate) fn init(seed: u64) -> Params {
        let key = RngKey::new(seed, "candle-lm-init");
        let mut k = 0u64;
        let mut normal = |shape: Vec<usize>, std: f32| {
            let n: usize = shape.iter().product();
            let v = (0..n)
                .map(|_| {
                    k += 2;
                    // Box-Muller over two counter draws.
                    let (u1, u2) = (key.unit_at(k).max(1e-12), key.unit_at(k + 1));
                    std * ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
                })
                .collect();
            (shape, v)
        };
        let proj = 0.02 / (2.0 * LAYERS as f32).sqrt();
        let mut p =
            vec![normal(vec![CLASSES, DIM], 0.02), normal(vec![SEQ, DIM], 0.01), normal(vec![DIM, CLASSES], 0.02)];
        for _ in 0..LAYERS {
            p.push((vec![DIM], vec![1.0; DIM]));
            p.push((vec![DIM], vec![0.0; DIM]));
            p.push(normal(vec![DIM, 3 * DIM], 0.02));
            p.push(normal(vec![DIM, DIM], proj));
            p.push((vec![DIM], vec![1.0; DIM]));
            p.push((vec![DIM], vec![0.0; DIM]));
            p.push(normal(vec![DIM, 4 * DIM], 0.02));
            p.push(normal(vec![4 * DIM, DIM], proj));
        }
        p.push((vec![DIM], vec![1.0; DIM]));
        p.push((vec![DIM], vec![0.0; DIM]));
        Params(p)
    }
}

/// The weights as candle variables, their optimizer, and the causal mask every batch shares.
pub(crate) struct Model {
    vars: Vec<Var>,
    opt: AdamW,
    causal: Tensor,
}

impl Model {
    /// A model with the weights `init`, on `device`.
    pub(crate) fn new(init: &Params, device: &Device) -> Res<Model> {
        let vars = init
            .0
            .iter()
            .map(|(shape, v)| Var::from_tensor(&Tensor::from_vec(v.clone(), shape.as_slice(), device)?))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let opt = AdamW::new(vars.clone(), ParamsAdamW { lr: 2e-3, weight_decay: 0.0, ..Default::default() })?;
        let causal = Tensor::tril2(SEQ, DType::U8, device)?;
        Ok(Model { vars, opt, causal })
    }

    /// Trains steps `from..to` on `feed`'s steps; the loss of each, before its update.
    pub(crate) fn run(&mut self, feed: &mut Feed, from: usize, to: usize) -> Res<Vec<Point>> {
        let mut out = Vec::with_capacity(to - from);
        for _ in from..to {
            let (ranks, fingerprint) = feed.next()?;
            let loss = self.train_step(&ranks)?;
            out.push(Point { loss, fingerprint });
        }
        Ok(out)
    }

    /// One optimizer step on the global batch held by `ranks`: each rank's summed token loss
    /// divided by the global token count (an all-reduce of counts), gradients summed over
    /// ranks in rank order (an all-reduce of gradients). Returns the global mean loss.
    pub(crate) fn train_step(&mut self, ranks: &[Tensors]) -> Res<f64> {
        let counts: Vec<f64> = ranks
            .iter()
            .map(|t| Ok(t.require("loss_mask")?.to_dtype(DType::F64)?.sum_all()?.to_scalar::<f64>()?))
            .collect::<Res<_>>()?;
        let total: f64 = counts.iter().sum();
        let mut sum: Option<GradStore> = None;
        let mut loss = 0.0;
        for t in ranks {
            let l = self.loss_sum(t)?;
            loss += l.to_scalar::<f32>()? as f64;
            let grads = (l / total)?.backward()?;
            sum = Some(match sum {
                None => grads,
                Some(mut acc) => {
                    for v in &self.vars {
                        if let (Some(a), Some(g)) = (acc.get(v.as_tensor()), grads.get(v.as_tensor())) {
                            let s = (a + g)?;
                            acc.insert(v.as_tensor(), s);
                        }
                    }
                    acc
                }
            });
        }
        self.opt.step(&sum.ok_or("a step without ranks")?)?;
        Ok(loss / total)
    }

    /// Summed next-token cross-entropy over the batch's real targets.
    fn loss_sum(&self, t: &Tensors) -> Res<Tensor> {
        let ids = t.require("input_ids")?;
        let (b, n) = ids.dims2()?;
        let v = &self.vars;
        let (wte, wpe) = (v[0].as_tensor(), v[1].as_tensor());
        let pos = t.require("positions")?.flatten_all()?;
        let ids = ids.flatten_all()?.clamp(0u32, CLASSES as u32 - 1)?;
        let mut x = (wte.index_select(&ids, 0)? + wpe.index_select(&pos, 0)?)?; // [b·n, d]
        // Block-diagonal causal mask: a token sees earlier tokens of its own document only.
        let seg = t.require("segment_ids")?;
        let same = seg.unsqueeze(2)?.broadcast_as((b, n, n))?.eq(&seg.unsqueeze(1)?.broadcast_as((b, n, n))?)?;
        let allowed = same.mul(&self.causal.broadcast_as((b, n, n))?)?;
        let bias = ((allowed.to_dtype(DType::F32)? - 1.0)? * 1e9)?.unsqueeze(1)?; // [b, 1, n, n]
        let dh = DIM / HEADS;
        for l in 0..LAYERS {
            let p = &v[3 + 8 * l..11 + 8 * l];
            let h = candle_nn::ops::layer_norm_slow(&x, p[0].as_tensor(), p[1].as_tensor(), 1e-5)?;
            let qkv = h.matmul(p[2].as_tensor())?.reshape((b, n, 3, HEADS, dh))?.permute((2, 0, 3, 1, 4))?;
            let (q, k, vv) = (qkv.get(0)?.contiguous()?, qkv.get(1)?.contiguous()?, qkv.get(2)?.contiguous()?);
            let scores = (q.matmul(&k.t()?)? * (1.0 / (dh as f64).sqrt()))?.broadcast_add(&bias)?;
            let att = candle_nn::ops::softmax(&scores, D::Minus1)?;
            let y = att.matmul(&vv)?.transpose(1, 2)?.reshape((b * n, DIM))?;
            x = (x + y.matmul(p[3].as_tensor())?)?;
            let h = candle_nn::ops::layer_norm_slow(&x, p[4].as_tensor(), p[5].as_tensor(), 1e-5)?;
            x = (x + h.matmul(p[6].as_tensor())?.gelu()?.matmul(p[7].as_tensor())?)?;
        }
        let last = v.len() - 2;
        let h = candle_nn::ops::layer_norm_slow(&x, v[last].as_tensor(), v[last + 1].as_tensor(), 1e-5)?;
        let logp = candle_nn::ops::log_softmax(&h.matmul(v[2].as_tensor())?, D::Minus1)?; // [b·n, classes]
        let mask = t.require("loss_mask")?.flatten_all()?;
        let labels = t.require("labels")?.flatten_all()?;
        // Ignored positions (label -100) gather class 0 and are masked out.
        let safe =
            mask.where_cond(&labels, &labels.zeros_like()?)?.clamp(0i64, CLASSES as i64 - 1)?.to_dtype(DType::U32)?;
        let picked = logp.gather(&safe.unsqueeze(1)?, 1)?.squeeze(1)?;
        Ok((picked * mask.to_dtype(DType::F32)?)?.sum_all()?.neg()?)
    }
}
