// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

interface IPriceFeed {
    function latestRoundData()
        external
        view
        returns (uint80 roundId, int256 answer, uint256 startedAt, uint256 updatedAt, uint80 answeredInRound);
}

interface IPausable {
    function paused() external view returns (bool);
}

interface IMintable {
    function mint(address to, uint256 amount) external;
}

/// @title Demo exchange: trades registered stock tokens for USD1 at the feed price
/// @notice Sells pay from its own USD1 balance; buys mint the stock token, so the exchange must be one
/// of its minters. Stock tokens and USD1 both have 18 decimals; feeds have 8.
contract DemoExchange is Ownable {
    using SafeERC20 for IERC20;

    IERC20 public immutable usd1;
    uint256 public maxPriceAge = 1 days;
    mapping(address stockToken => address feed) public feedOf;

    event FeedSet(address indexed stockToken, address indexed feed);
    event MaxPriceAgeSet(uint256 maxPriceAge);
    event Sold(
        address indexed seller, address indexed stockToken, uint256 amountIn, uint256 usd1Out, address recipient
    );
    event Bought(
        address indexed buyer, address indexed stockToken, uint256 usd1In, uint256 amountOut, address recipient
    );

    constructor(IERC20 usd1_) Ownable(msg.sender) {
        usd1 = usd1_;
    }

    /// @notice Registers (or, with feed = 0, unregisters) a stock token and its price feed.
    function setFeed(address stockToken, address feed) external onlyOwner {
        feedOf[stockToken] = feed;
        emit FeedSet(stockToken, feed);
    }

    function setMaxPriceAge(uint256 maxPriceAge_) external onlyOwner {
        maxPriceAge = maxPriceAge_;
        emit MaxPriceAgeSet(maxPriceAge_);
    }

    /// @notice Moves tokens (USD1 liquidity or bought stock) out of the exchange.
    function withdraw(IERC20 token, address to, uint256 amount) external onlyOwner {
        token.safeTransfer(to, amount);
    }

    /// @notice USD1 paid for `amountIn` of `stockToken` at the current feed price.
    function quote(address stockToken, uint256 amountIn) public view returns (uint256) {
        return amountIn * _price(stockToken) / 1e8;
    }

    /// @notice Sells `amountIn` of `stockToken` (pulled from msg.sender; approve first) for USD1 sent to `recipient`.
    function sell(address stockToken, uint256 amountIn, uint256 minUsd1Out, address recipient)
        external
        returns (uint256 usd1Out)
    {
        require(!IPausable(stockToken).paused(), "DemoExchange: token is paused");
        usd1Out = quote(stockToken, amountIn);
        require(usd1Out >= minUsd1Out, "DemoExchange: output below minimum");
        IERC20(stockToken).safeTransferFrom(msg.sender, address(this), amountIn);
        usd1.safeTransfer(recipient, usd1Out);
        emit Sold(msg.sender, stockToken, amountIn, usd1Out, recipient);
    }

    /// @notice Amount of `stockToken` bought with `usd1In` USD1 at the current feed price.
    function quoteBuy(address stockToken, uint256 usd1In) public view returns (uint256) {
        return usd1In * 1e8 / _price(stockToken);
    }

    /// @notice Buys `stockToken` with `usd1In` USD1 (pulled from msg.sender; approve first), minted to `recipient`.
    /// @dev Checks before moving anything, as `sell` does, so a refused trade reverts with its own reason.
    function buy(address stockToken, uint256 usd1In, uint256 minTokensOut, address recipient)
        external
        returns (uint256 amountOut)
    {
        require(!IPausable(stockToken).paused(), "DemoExchange: token is paused");
        amountOut = quoteBuy(stockToken, usd1In);
        require(amountOut >= minTokensOut, "DemoExchange: output below minimum");
        usd1.safeTransferFrom(msg.sender, address(this), usd1In);
        IMintable(stockToken).mint(recipient, amountOut);
        emit Bought(msg.sender, stockToken, usd1In, amountOut, recipient);
    }

    function _price(address stockToken) private view returns (uint256) {
        address feed = feedOf[stockToken];
        require(feed != address(0), "DemoExchange: unknown token");
        (, int256 answer,, uint256 updatedAt,) = IPriceFeed(feed).latestRoundData();
        require(answer > 0, "DemoExchange: invalid price");
        require(updatedAt + maxPriceAge >= block.timestamp, "DemoExchange: stale price");
        return uint256(answer);
    }
}
