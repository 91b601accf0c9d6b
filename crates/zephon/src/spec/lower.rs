//! A spec lowered to the builder: the same `Pipeline` calls a Rust user makes.

use zephon_core::Tail;
use zephon_io::Fields;
use zephon_mix::{EnsureMixture, EstimateOptions, Exhaustion, Order, RowOrder, Shuffle};
use zephon_operator::Stage;
use zephon_pack::{Algorithm, EndOfData, LongerThanRow, Pack, PackOptions};

use super::*;
use crate::error::{Error, Result};
use crate::mixture::{Dataset, Mixture};
use crate::pipeline::Pipeline;

impl Spec {
    /// The validation pass `[validation]` describes, if any (opens nothing yet): the
    /// training pipeline's reading, tokenizing and packing settings over the held-out datasets
    /// (see [`crate::Validation`]). Long documents are truncated to the row and long
    /// conversations too, unless `[chat]` skips them: a record makes one row.
    pub fn validation(&self) -> Result<Option<crate::Validation>> {
        let Some(v) = &self.validation else { return Ok(None) };
        let mut spec = self.clone();
        spec.datasets = v.datasets.iter().map(|d| DatasetSpec { weight: Some(1.0), ..d.clone() }).collect();
        spec.ensure_mixture = None;
        spec.schedule = None;
        spec.rows_per_step = Some(
            v.rows_per_step
                .map_or_else(|| self.rows_per_step().map(|g| g.at(0)), Ok)
                .map_err(|m| Error::Spec { path: self.file.clone(), message: m })?,
        );
        spec.source = SourceSpec::default();
        if let Some(t) = &mut spec.tokenize {
            t.long_documents = Some(TokenizeLongDocuments::Keep);
            t.max_tokens = None;
        }
        if let Some(c) = &mut spec.chat
            && c.long_conversations == Some(ChatLongConversations::SplitAtTurns)
        {
            c.long_conversations = Some(ChatLongConversations::Truncate);
        }
        if let Some(r) = spec.registered.iter().find(|r| r.stage() == Stage::Rows) {
            return Err(Error::Spec {
                path: self.file.clone(),
                message: format!(
                    "[validation] packs its rows itself and [{}] works on packed rows: a validation pass with a \
                     section at the rows stage is not supported",
                    r.name()
                ),
            });
        }
        let pack = spec
            .pack_op()?
            .ok_or_else(|| Error::Spec { path: self.file.clone(), message: "[validation] needs [pack]".into() })?;
        spec.pack = None;
        spec.shuffle = None;
        spec.validation = None;
        let shuffle = v.shuffle.map(Shuffle::buffer).transpose()?;
        Ok(Some(spec.pipeline()?.validation(&pack, shuffle)?))
    }

    /// The pipeline the spec describes (opens nothing yet).
    pub fn pipeline(&self) -> Result<Pipeline> {
        let bad = |m: String| Error::Spec { path: self.file.clone(), message: m };
        let mut mixture = Mixture::new().storage(self.storage_options());
        let shares = self.schedule.as_ref().and_then(|s| s.shares.as_deref()).unwrap_or_default();
        let (first_shares, later_shares) = match shares.split_first() {
            Some(((_, first), later)) => {
                if let Some(n) = first.keys().find(|n| !self.datasets.iter().any(|d| d.name == **n)) {
                    return Err(bad(format!("[schedule] shares at step 0 name {n:?}, which is no [[dataset]]")));
                }
                if let Some(d) = self.datasets.iter().find(|d| !first.contains_key(&d.name)) {
                    return Err(bad(format!("[schedule] shares at step 0 do not name dataset {}", d.name)));
                }
                (Some(first), later)
            }
            None => (None, &[][..]),
        };
        for d in &self.datasets {
            let ids = self.pretokenized.as_ref().map(|p| p.field.clone().unwrap_or_else(|| "input_ids".into()));
            let messages = self.chat.as_ref().map(|c| c.field.clone().unwrap_or_else(|| "messages".into()));
            let paths = d.path.all();
            let Some(first) = paths.first() else {
                return Err(bad(format!("dataset {}: `path` is an empty list", d.name)));
            };
            let mut ds =
                paths[1..].iter().fold(Dataset::new(&d.name, self.resolve(first)), |ds, p| ds.also(self.resolve(p)));
            if let Some(split) = &d.split {
                let split = zephon_io::Split::parse(split).ok_or_else(|| {
                    bad(format!("dataset {}: split {split:?} is not train, validation or test", d.name))
                })?;
                ds = ds.split(split);
            }
            let mut ds = ds.fields(Fields {
                text: match (&ids, &messages) {
                    (None, None) => Some(d.text_field.clone().unwrap_or_else(|| "text".into())),
                    _ => None,
                },
                extra: d.extra_fields.iter().cloned().chain(ids).collect(),
                json: messages.into_iter().collect(),
                allow_empty: d.allow_empty,
                max_row_bytes: d.max_row_bytes,
                images: d.images.clone(),
            });
            if let Some(w) = d.loss_weight {
                ds = ds.loss_weight(w);
            }
            if let Some(f) = &d.loss_weight_field {
                ds = ds.loss_weight_field(f);
            }
            ds = match (d.share, d.weight, first_shares.and_then(|w| w.get(&d.name))) {
                (Some(s), _, _) | (_, _, Some(&s)) => ds.share(s),
                (_, Some(w), _) => ds.weight(w),
                _ => ds,
            };
            mixture = mixture.dataset(ds);
        }
        for (step, w) in later_shares {
            if let Some(n) = w.keys().find(|n| !self.datasets.iter().any(|d| d.name == **n)) {
                return Err(bad(format!("[schedule] shares at step {step} name {n:?}, which is no [[dataset]]")));
            }
            let named: Vec<(&str, f64)> = w.iter().map(|(n, s)| (n.as_str(), *s)).collect();
            mixture = mixture.shares_from(*step, &named);
        }
        let src = &self.source;
        let rows = match src.order {
            SourceOrder::Sequential => RowOrder::Sequential,
            SourceOrder::Shuffled => RowOrder::Shuffled,
            SourceOrder::Blocks => RowOrder::Blocks { size: src.block_size },
            SourceOrder::Global => RowOrder::Global,
        };
        let exhaustion = src.exhaustion;
        mixture = match (src.chunk_size, src.chunk_tokens) {
            (Some(_), Some(_)) => {
                return Err(bad("[source] chunk_size and chunk_tokens exclude each other: give one".into()));
            }
            (_, Some(t)) => mixture.chunk_tokens(t),
            (Some(n), None) => mixture.chunk_size(n),
            (None, None) => mixture,
        };
        mixture = mixture.order(Order { shuffle_shards: src.shuffle_shards, rows }).exhaustion(exhaustion, src.passes);
        if let Some(seed) = src.seed {
            mixture = mixture.seed(seed);
        }
        if let Some(b) = src.balance {
            mixture = mixture.balance(b);
        }
        if let Some(e) = &self.estimate {
            let d = EstimateOptions::default();
            mixture = mixture.estimate(EstimateOptions {
                length_rows: e.length_rows.unwrap_or(d.length_rows),
                token_rows: e.token_windows.unwrap_or(d.token_rows),
                max_token_bytes: e.window_bytes.unwrap_or(d.max_token_bytes),
                ..d
            });
        }

        let (bad_records, tail) = (self.run.bad_records, self.run.tail);
        let mut p = Pipeline::new(mixture).seed(self.seed).bad_records(bad_records).tail(tail).exec(self.exec());

        if let Some(im) = &self.images {
            #[cfg(feature = "vision")]
            {
                p = p.images(self.images_op(im)?);
            }
            #[cfg(not(feature = "vision"))]
            {
                let _ = im;
                return Err(Error::Build("this build has no `vision` feature: [images] is unavailable".into()));
            }
        }
        p = self.registered_ops(Stage::Records, p)?;
        if let Some(pt) = &self.pretokenized {
            #[cfg(feature = "text")]
            {
                let v = |e: zephon_text::Error| bad(format!("[pretokenized] {e}"));
                let mut op = zephon_text::PreTokenized::new(pt.field.as_deref().unwrap_or("input_ids"));
                if let Some(n) = pt.vocab_size {
                    op = op.vocab_size(n).map_err(v)?;
                }
                if let Some(e) = pt.eos {
                    op = op.eos(e).map_err(v)?;
                }
                p = p.then(op);
            }
            #[cfg(not(feature = "text"))]
            {
                let _ = pt;
                return Err(Error::Build("this build has no `text` feature: [pretokenized] is unavailable".into()));
            }
        }
        if let Some(c) = &self.chat {
            #[cfg(feature = "text")]
            {
                p = p.then(self.chat_op(c)?);
            }
            #[cfg(not(feature = "text"))]
            {
                let _ = c;
                return Err(Error::Build("this build has no `text` feature: [chat] is unavailable".into()));
            }
        }
        if let Some(t) = &self.tokenize {
            #[cfg(feature = "text")]
            {
                p = p.tokenize(self.tokenize_op(t)?);
            }
            #[cfg(not(feature = "text"))]
            {
                let _ = t;
                return Err(Error::Build("this build has no `text` feature: [tokenize] is unavailable".into()));
            }
        }
        p = self.registered_ops(Stage::Tokens, p)?;
        if let Some(e) = &self.ensure_mixture {
            let slack = e.slack_tokens.unwrap_or(4096);
            let mut ensure = EnsureMixture::slack_tokens(slack);
            if let Some(t) = e.max_held_tokens {
                ensure = ensure.max_held_tokens(t)?;
            }
            p = p.ensure_mixture(match e.hold_per_lane(self.lanes).map_err(bad)? {
                Some(hold) => ensure.hold(hold)?,
                None => ensure,
            });
        }
        if let Some(pack) = self.pack_op()? {
            p = p.pack(pack);
        }
        p = self.registered_ops(Stage::Rows, p)?;
        if let Some(s) = &self.shuffle {
            let buffer = s.per_lane(self.lanes).map_err(bad)?;
            let shuffle = Shuffle::buffer(buffer)?;
            p = p.shuffle(if s.warm_up { shuffle.warm_up() } else { shuffle });
        }
        Ok(p)
    }

    /// `p` followed by the operators of the registered sections at `stage`.
    fn registered_ops(&self, stage: Stage, mut p: Pipeline) -> Result<Pipeline> {
        let context = self.section_context();
        for r in self.registered.iter().filter(|r| r.stage() == stage) {
            p = p.then(r.build(&context)?);
        }
        Ok(p)
    }

    /// The `[pack]` packer, if any.
    fn pack_op(&self) -> Result<Option<Pack>> {
        let bad = |m: String| Error::Spec { path: self.file.clone(), message: m };
        let tail = self.run.tail;
        let Some(pk) = &self.pack else { return Ok(None) };
        let bins = pk.bins_per_lane(self.lanes).map_err(bad)?;
        let algorithm = match pk.algorithm {
            PackAlgorithm::Wrap => Algorithm::Wrap,
            PackAlgorithm::FirstFit => Algorithm::FirstFit { bins },
            PackAlgorithm::BestFit => Algorithm::BestFit { bins },
            PackAlgorithm::OnePerRow => Algorithm::FirstFit { bins: 1 },
        };
        let mut config = PackOptions::new(algorithm, pk.seq_len);
        match (pk.algorithm, pk.max_segments) {
            (PackAlgorithm::OnePerRow, Some(m)) if m != 1 => {
                return Err(bad(format!(
                    "[pack] algorithm = \"one_per_row\" puts one document in each row: max_segments = {m} \
                     contradicts it"
                )));
            }
            (PackAlgorithm::OnePerRow, _) => config.max_segments = 1,
            (_, Some(m)) => config.max_segments = m,
            (_, None) => {}
        }
        config.longer_than_row = match pk.long_documents.unwrap_or(PackLongDocuments::Split) {
            PackLongDocuments::Split => LongerThanRow::Split,
            PackLongDocuments::Truncate => LongerThanRow::Truncate,
        };
        let finite = self.source.exhaustion != Exhaustion::Repeat;
        config.end_of_data = match pk.end_of_data {
            None if finite && tail == Tail::Drop && algorithm != Algorithm::Wrap => EndOfData::FillRows,
            None | Some(PackEndOfData::KeepPieces) => EndOfData::KeepPieces,
            Some(PackEndOfData::FillRows) => EndOfData::FillRows,
        };
        config.warm_up = pk.warm_up;
        if let Some(id) = pk.pad_id {
            config.pad_id = id;
        }
        if let Some(i) = pk.ignore_index {
            config.ignore_index = i;
        }
        config.mask_labels = pk.mask_labels;
        config.source_ids = pk.source_ids;
        // The datasets' weights reach the packer when it is assembled.
        config.loss_weights = pk.loss_weights.then(zephon_pack::LossWeights::default);
        Ok(Some(Pack::new(config)?))
    }

    /// The `[chat]` operator: its tokenizer and template from files, its settings.
    #[cfg(feature = "text")]
    fn chat_op(&self, c: &ChatSpec) -> Result<zephon_text::Chat> {
        use zephon_text::{AssistantSpan, Chat, ChatTemplate, LongConversations, LossOn, Tokenizer};
        let bad = |m: String| Error::Spec { path: self.file.clone(), message: format!("[chat] {m}") };
        let tokenizer = Tokenizer::from_file(&self.resolve(&c.tokenizer)).map_err(|e| bad(e.to_string()))?;
        let path = self.resolve(&c.template);
        let template = if path.extension().is_some_and(|x| x == "json") {
            ChatTemplate::from_tokenizer_config(&path, c.template_name.as_deref())
        } else {
            if c.template_name.is_some() {
                return Err(bad(
                    "template_name picks one of a tokenizer_config.json's templates, and the template is \
                                a Jinja file"
                        .into(),
                ));
            }
            std::fs::read_to_string(&path)
                .map_err(|source| zephon_text::Error::Read { path: path.display().to_string(), source })
                .and_then(|text| ChatTemplate::new(&text, &path.display().to_string()))
        }
        .map_err(|e| bad(e.to_string()))?;
        let mut vars: std::collections::BTreeMap<String, serde_json::Value> =
            c.variables.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str()))).collect();
        vars.extend(c.flags.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(*v))));
        let images = self.image_placeholders("chat", &tokenizer, c.image_tokens())?;
        let mut chat = Chat::new(tokenizer, template.with_globals(vars))
            .field(c.field.as_deref().unwrap_or("messages"))
            .loss_on(match c.loss_on.unwrap_or(ChatLossOn::AssistantTurns) {
                ChatLossOn::AssistantTurns => LossOn::AssistantTurns,
                ChatLossOn::LastAssistantTurn => LossOn::LastAssistantTurn,
                ChatLossOn::Everything => LossOn::Everything,
            })
            .assistant_span(match c.assistant_span.unwrap_or(ChatAssistantSpan::Generated) {
                ChatAssistantSpan::Generated => AssistantSpan::Generated,
                ChatAssistantSpan::Content => AssistantSpan::Content,
            })
            .map_err(|e| bad(e.to_string()))?;
        if let Some(im) = images {
            chat = chat.images(im);
        }
        if let Some(roles) = &c.roles {
            chat = chat.roles(&roles.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if let Some(policy) = c.long_conversations {
            let policy = match policy {
                ChatLongConversations::SplitAtTurns => LongConversations::SplitAtTurns,
                ChatLongConversations::Truncate => LongConversations::Truncate,
                ChatLongConversations::Skip => LongConversations::Skip,
            };
            chat = match c.max_tokens {
                Some(n) => chat.long_conversations(policy, n).map_err(|e| bad(e.to_string()))?,
                None => chat.long_conversations_at_row_length(policy),
            };
        }
        Ok(chat)
    }

    #[cfg(feature = "vision")]
    fn images_op(&self, im: &ImagesSpec) -> Result<zephon_vision::Images> {
        use zephon_operator::DType;
        use zephon_vision::normalize::Normalize;
        use zephon_vision::resize::{Filter, Fit, ResizeSpec};
        use zephon_vision::{ImageTokens, Images, ImagesOptions, JpegBackend, PixelLayout, PixelLimit, SmartResize};
        let bad = |m: String| Error::Spec { path: self.file.clone(), message: format!("[images] {m}") };
        let v = |e: zephon_vision::VisionError| bad(e.to_string());
        let mut c = match im.preset {
            None | Some(ImagePreset::Llava) => ImagesOptions::llava(self.seed).map_err(v)?,
            Some(ImagePreset::Qwen2Vl) => ImagesOptions::qwen2_vl(self.seed),
        };
        let filter = im.filter.map(|f| match f {
            ImageFilter::Bilinear => Filter::Bilinear,
            ImageFilter::Bicubic => Filter::Bicubic,
            ImageFilter::Lanczos3 => Filter::Lanczos3,
        });
        // A setting that would have no effect is refused, never ignored.
        if im.fit.is_some() && im.size.is_none() {
            return Err(bad("fit applies to a fixed size: give `size` with it".into()));
        }
        if im.size.is_some() && im.dynamic_pixels.is_some() {
            return Err(bad("give `size` (a fixed square) or `dynamic_pixels`, not both".into()));
        }
        // A new size keeps the preset's filter unless `filter` names another.
        let preset_filter = c.resize.filter();
        if let Some(side) = im.size {
            let fit = match im.fit.unwrap_or(ImageFit::CenterCrop) {
                ImageFit::CenterCrop => Fit::CenterCrop,
                ImageFit::PadToSquare => {
                    Fit::PadToSquare { fill: zephon_vision::resize::mean_fill(Normalize::CLIP.mean()) }
                }
                ImageFit::Stretch => Fit::Stretch,
            };
            c.resize = ResizeSpec::fixed(side, side, fit).map_err(v)?;
        }
        if let Some([min, max]) = im.dynamic_pixels {
            c.resize = ResizeSpec::smart(SmartResize::new(28, min, max).map_err(v)?);
        }
        c.resize = c.resize.with_filter(filter.unwrap_or(preset_filter));
        if let Some(n) = im.normalize {
            c.normalize = match n {
                ImageNormalize::Clip => Normalize::CLIP,
                ImageNormalize::Imagenet => Normalize::IMAGENET,
                ImageNormalize::Half => Normalize::HALF,
            };
        }
        if let Some(d) = im.dtype {
            c.dtype = match d {
                ImageDtype::F32 => DType::F32,
                ImageDtype::Bf16 => DType::BF16,
                ImageDtype::F16 => DType::F16,
            };
        }
        if let Some(l) = im.layout {
            c.layout = match l {
                ImageLayout::Vit => PixelLayout::Vit { patch: 14 },
                ImageLayout::Qwen2Vl => PixelLayout::Qwen2Vl(zephon_vision::patch::QwenPatching::QWEN2_VL),
                ImageLayout::Chw => PixelLayout::Chw,
            };
        }
        if let Some(p) = im.patch {
            match c.layout {
                PixelLayout::Vit { .. } => c.layout = PixelLayout::Vit { patch: p },
                _ => return Err(bad("patch is the side of ViT patches: it needs layout = \"vit\"".into())),
            }
        }
        if let Some(n) = im.tokens {
            c.tokens = ImageTokens::Fixed(n);
        }
        if let Some(max) = im.max_pixels {
            c.decode = c.decode.limit(PixelLimit::new(max).map_err(v)?);
        }
        if let Some(b) = im.backend {
            let backend = match b {
                JpegDecoder::Zune => JpegBackend::Zune,
                JpegDecoder::LibjpegTurbo => JpegBackend::LibjpegTurbo,
            };
            c.decode = c.decode.jpeg_backend(backend).map_err(v)?;
        }
        if let Some(g) = im.reduced_decode {
            if im.backend != Some(JpegDecoder::LibjpegTurbo) {
                return Err(bad(
                    "reduced_decode needs backend = \"libjpeg-turbo\" (zune-jpeg decodes at full scale)".into()
                ));
            }
            c.reduced_decode = Some(zephon_vision::resize::ReducingGap::new(g).map_err(v)?);
        }
        if im.random_resized_crop {
            c.crop = Some(zephon_vision::augment::RandomResizedCrop::DEFAULT);
        }
        if im.random_flip {
            c.flip = Some(zephon_vision::augment::RandomFlip::HALF);
        }
        Images::new(c).map_err(v)
    }

    /// How `[section]` places images, when there is an `[images]` section (feature `text`).
    #[cfg(feature = "text")]
    fn image_placeholders(
        &self,
        section: &str,
        tokenizer: &zephon_text::Tokenizer,
        t: ImageTokensSpec<'_>,
    ) -> Result<Option<zephon_text::ImagePlaceholders>> {
        if self.images.is_none() {
            return Ok(None);
        }
        let bad = |m: String| Error::Spec { path: self.file.clone(), message: format!("[{section}] {m}") };
        let token = t.image_token.ok_or_else(|| {
            bad("image_token is needed with [images]: the added token each image's placeholders use".into())
        })?;
        let marker = t.image_marker.unwrap_or("<image>");
        let im =
            zephon_text::ImagePlaceholders::new(tokenizer, "image", marker, token).map_err(|e| bad(e.to_string()))?;
        match (t.image_start, t.image_end) {
            (Some(a), Some(b)) => im.around(tokenizer, a, b).map(Some).map_err(|e| bad(e.to_string())),
            (None, None) => Ok(Some(im)),
            _ => Err(bad("image_start and image_end go together: give both or neither".into())),
        }
    }

    #[cfg(feature = "text")]
    fn tokenize_op(&self, t: &TokenizeSpec) -> Result<zephon_text::Tokenize> {
        use zephon_text::{LongCut, LongDocuments, Tokenize, Tokenizer};
        let tokenizer = Tokenizer::from_file(&self.resolve(&t.tokenizer))?;
        // Each dataset's own `text_field` is set by the pipeline when it opens the datasets.
        let tokenizer = tokenizer.allow_special_tokens_in_text(t.special_tokens_in_text);
        let mut op = Tokenize::new(tokenizer.clone());
        if let Some(im) = self.image_placeholders("tokenize", &tokenizer, t.image_tokens())? {
            op = op.images(im);
        }
        if let Some(b) = &t.bos {
            op = op.bos(b)?;
        }
        if let Some(e) = &t.eos {
            op = op.eos(e)?;
        }
        // The row length and a truncating packer reach tokenize when the pipeline is
        // assembled, as they do for a builder's Tokenize.
        let op = match t.long_documents {
            Some(TokenizeLongDocuments::Keep) => op.long_documents(LongDocuments::Keep)?,
            Some(TokenizeLongDocuments::Split) => op.long_documents_by_packer(Some(LongCut::Split), t.max_tokens)?,
            Some(TokenizeLongDocuments::Truncate) => {
                op.long_documents_by_packer(Some(LongCut::Truncate), t.max_tokens)?
            }
            None => op.long_documents_by_packer(None, t.max_tokens)?,
        };
        Ok(op)
    }
}
